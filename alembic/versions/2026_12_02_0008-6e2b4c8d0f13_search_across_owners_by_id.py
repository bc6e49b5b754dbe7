"""search across owners by id: drop ``ix_jobs_seq``

Every job transition is a non-HOT update, so every index on ``jobs`` gets one new entry
per row version; the full index ``ix_jobs_seq`` cost about 14 % of the drain's server
time, for searches across owners only. Job ids are UUIDv7 (time-ordered), so "newest
first across owners" walks ``pk_jobs`` backwards instead:

* ``ix_jobs_seq`` is dropped;
* ``ix_jobs_attention`` (partial on the attention states) is rebuilt as ``(state, id)``
  (was ``(state, seq)``), the order of the walk by id;
* ``bulk_operations`` gains ``through_id`` and ``after_id``: a filter across owners walks
  ``pk_jobs`` after ``after_id`` up to ``through_id`` (the newest id when it was
  accepted), and ``through_seq`` becomes NULL for it (and for an id list) -- the global
  ``max(seq)`` has no index any more. One owner's filter keeps ``position`` and
  ``through_seq`` on ``ix_jobs_owner_seq``.

An operation across owners still running at the upgrade continues by id over the
remaining jobs' id range (read while ``ix_jobs_seq`` still exists): no remaining job is
skipped; a job already acted on whose id falls in that range is looked at again and
counted skipped (its move is refused from its new state).

Revision ID: 6e2b4c8d0f13
Revises: 8a4c6e2f1b3d
Create Date: 2026-12-02 07:00:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6e2b4c8d0f13"
down_revision: str | None = "8a4c6e2f1b3d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of the vocabulary as this revision writes it.
ATTENTION = "('cancel_requested', 'canceled', 'failed', 'unresolved', 'waiting')"
UNFINISHED = "('queued', 'running')"
NIL = "'00000000-0000-0000-0000-000000000000'::uuid"

# uuid has no min() or max(): the first and last ids are ORDER BY id ... LIMIT 1.
# A stored filter that selects one owner (atlas_jobs._app.db.reads.single_owner).
ONE_OWNER = """
(b.filter->>'owner' IS NOT NULL
 OR (SELECT count(DISTINCT o) FROM jsonb_array_elements_text(
         coalesce(b.filter->'owners', '[]'::jsonb)) AS o) = 1)
"""

TO_ID_WALK = f"""
UPDATE bulk_operations AS u
   SET after_id = CASE WHEN r.first_id IS NULL THEN coalesce(r.last_id, {NIL})
                       ELSE (SELECT j.id FROM jobs AS j WHERE j.id < r.first_id
                              ORDER BY j.id DESC LIMIT 1) END,
       through_id = coalesce(r.last_id, {NIL}),
       through_seq = NULL
  FROM (SELECT b.id,
               (SELECT j.id FROM jobs AS j WHERE j.seq > b.position AND j.seq <= b.through_seq
                 ORDER BY j.id LIMIT 1) AS first_id,
               (SELECT j.id FROM jobs AS j WHERE j.seq > b.position AND j.seq <= b.through_seq
                 ORDER BY j.id DESC LIMIT 1) AS last_id
          FROM bulk_operations AS b
         WHERE b.filter IS NOT NULL AND b.state IN {UNFINISHED} AND NOT {ONE_OWNER}) AS r
 WHERE u.id = r.id
"""

TO_SEQ_WALK = f"""
UPDATE bulk_operations AS b
   SET through_seq = CASE
           WHEN b.through_id IS NULL OR b.state NOT IN {UNFINISHED} THEN 0
           ELSE coalesce((SELECT max(j.seq) FROM jobs AS j WHERE j.id <= b.through_id), 0) END,
       position = CASE
           WHEN b.through_id IS NULL OR b.state NOT IN {UNFINISHED} THEN b.position
           ELSE coalesce((SELECT min(j.seq) - 1 FROM jobs AS j
                           WHERE j.id > coalesce(b.after_id, {NIL}) AND j.id <= b.through_id),
                         (SELECT max(j.seq) FROM jobs AS j WHERE j.id <= b.through_id), 0) END
 WHERE b.through_seq IS NULL
"""


def upgrade() -> None:
    op.add_column("bulk_operations", sa.Column("through_id", sa.UUID(), nullable=True))
    op.add_column("bulk_operations", sa.Column("after_id", sa.UUID(), nullable=True))
    op.alter_column("bulk_operations", "through_seq", existing_type=sa.BigInteger(), nullable=True)
    op.execute(TO_ID_WALK)
    op.drop_index(op.f("ix_jobs_seq"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_attention"), table_name="jobs")
    op.create_index(
        op.f("ix_jobs_attention"),
        "jobs",
        ["state", "id"],
        postgresql_where=sa.text(f"state IN {ATTENTION}"),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_attention"), table_name="jobs")
    op.create_index(
        op.f("ix_jobs_attention"),
        "jobs",
        ["state", "seq"],
        postgresql_where=sa.text(f"state IN {ATTENTION}"),
    )
    op.create_index(op.f("ix_jobs_seq"), "jobs", ["seq"])
    op.execute(TO_SEQ_WALK)
    op.alter_column("bulk_operations", "through_seq", existing_type=sa.BigInteger(), nullable=False)
    op.drop_column("bulk_operations", "after_id")
    op.drop_column("bulk_operations", "through_id")
