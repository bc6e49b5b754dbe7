"""tags, search across owners and bulk operations

* ``jobs.tags``: the ``key=value`` labels a job is created with (``'{}'`` for the jobs
  that exist: none had any);
* the search indexes: ``ix_jobs_seq`` (every owner, newest first), ``ix_jobs_attention``
  (partial: the states an operator looks for that the drain never passes through) and
  ``ix_jobs_tags`` (GIN, tagged jobs only), and the statistics ``jobs_state_kind`` (the
  planner learns that kinds and states go together);
* ``api_keys.kinds``: the kinds an operator key may act on (NULL: every kind);
* ``bulk_operations``: an operator's action over a filter or an id list, run by the
  workers a batch at a time.

Revision ID: b8fd571ff01f
Revises: fb1ecd289857
Create Date: 2026-12-02 06:00:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "b8fd571ff01f"
down_revision: str | None = "fb1ecd289857"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the vocabularies as this revision writes them.
ATTENTION = "('cancel_requested', 'canceled', 'failed', 'unresolved', 'waiting')"
ACTIONS = "('cancel', 'fail', 'replay', 'resume')"
STATES = "('canceled', 'failed', 'queued', 'running', 'succeeded')"
TERMINAL = "('canceled', 'failed', 'succeeded')"


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column(
            "tags",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
    )
    op.create_index(op.f("ix_jobs_seq"), "jobs", ["seq"])
    op.create_index(
        op.f("ix_jobs_attention"),
        "jobs",
        ["state", "seq"],
        postgresql_where=sa.text(f"state IN {ATTENTION}"),
    )
    op.execute("CREATE STATISTICS jobs_state_kind (mcv) ON state, kind FROM jobs")
    op.create_index(
        op.f("ix_jobs_tags"),
        "jobs",
        ["tags"],
        postgresql_using="gin",
        postgresql_where=sa.text("tags <> '{}'::text[]"),
    )
    op.add_column("api_keys", sa.Column("kinds", postgresql.ARRAY(sa.Text()), nullable=True))
    op.create_table(
        "bulk_operations",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column("filter", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("job_ids", postgresql.ARRAY(sa.UUID()), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.Text(), nullable=False),
        sa.Column("key_id", sa.UUID(), nullable=True),
        sa.Column("kinds", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("through_seq", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("matched", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("done", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "skipped",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("error", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("1"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("worker_id", sa.Text(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bulk_operations")),
        sa.UniqueConstraint("seq", name=op.f("uq_bulk_operations_seq")),
        sa.CheckConstraint(f"action IN {ACTIONS}", name=op.f("ck_bulk_operations_action_known")),
        sa.CheckConstraint(f"state IN {STATES}", name=op.f("ck_bulk_operations_state_known")),
        sa.CheckConstraint(
            f"(state IN {TERMINAL}) = (finished_at IS NOT NULL)",
            name=op.f("ck_bulk_operations_finished_iff_terminal"),
        ),
        sa.CheckConstraint(
            "(filter IS NULL) <> (job_ids IS NULL)", name=op.f("ck_bulk_operations_filter_or_ids")
        ),
        sa.CheckConstraint(
            "done >= 0 AND matched >= done", name=op.f("ck_bulk_operations_counts_consistent")
        ),
    )
    op.create_index(
        op.f("ix_bulk_operations_unfinished"),
        "bulk_operations",
        ["created_at"],
        postgresql_where=sa.text("state IN ('queued', 'running')"),
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_bulk_operations_unfinished"), table_name="bulk_operations")
    op.drop_table("bulk_operations")
    op.drop_column("api_keys", "kinds")
    op.drop_index(op.f("ix_jobs_tags"), table_name="jobs")
    op.execute("DROP STATISTICS jobs_state_kind")
    op.drop_index(op.f("ix_jobs_attention"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_seq"), table_name="jobs")
    op.drop_column("jobs", "tags")
