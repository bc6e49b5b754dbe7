"""time-ordered attempt ids (atlas_uuid_v7); job_history without its foreign key

Revision ID: f1a2b3c4d5e6
Revises: d3c4d5e6f7a8
Create Date: 2026-11-30 01:20:00+00:00

``atlas_uuid_v7()``: a UUID version 7 (RFC 9562: the Unix time in milliseconds in the
first 48 bits, then version, random bits, variant), for the attempt ids the claim makes.
PostgreSQL 18 has ``uuidv7()``; the project runs on 15 and later, so it ships the
well-known SQL form: the millisecond timestamp overlaid onto ``gen_random_uuid()`` (whose
variant bits are already RFC 9562's) and the version nibble turned from 4 into 7 (bits 52
and 53 of the bytes). ``clock_timestamp()``, not ``now()``: ids made later in one
transaction sort later too. Job ids are made by the caller (``app.ids.new_id``), the same
layout. Time-ordered keys append at the right edge of a primary key instead of landing
anywhere in it: creation touches one leaf, and a claim of the oldest jobs one or two.

``fk_job_history_job_id_jobs`` is dropped. Every history row is written by the statement
that changes (or creates, or has locked) its job, from that statement's ``RETURNING`` or
under that job's row lock, so the key's check (an index probe and a KEY SHARE lock of the
job row per history row, two or more per job) proved nothing the writer did not already
hold. The key also deleted the history with its job (ON DELETE CASCADE); the pruner now
does that itself (``app.db.queries.PRUNE_HISTORY``, in the pruning transaction).
Downgrade deletes history rows whose job is gone, then restores the key.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "f1a2b3c4d5e6"
down_revision: str | None = "d3c4d5e6f7a8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UUID_V7 = """
CREATE FUNCTION atlas_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
SELECT CAST(encode(
           set_bit(
               set_bit(
                   overlay(uuid_send(gen_random_uuid())
                           PLACING substring(int8send(CAST(floor(
                               extract(epoch FROM clock_timestamp()) * 1000) AS bigint))
                                             FROM 3)
                           FROM 1 FOR 6),
                   52, 1),
               53, 1),
           'hex') AS uuid)
$$
"""


def upgrade() -> None:
    op.execute(UUID_V7)
    op.drop_constraint("fk_job_history_job_id_jobs", "job_history", type_="foreignkey")


def downgrade() -> None:
    op.execute(
        "DELETE FROM job_history AS h WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = h.job_id)"
    )
    op.create_foreign_key(
        "fk_job_history_job_id_jobs",
        "job_history",
        "jobs",
        ["job_id"],
        ["id"],
        ondelete="CASCADE",
    )
    op.execute("DROP FUNCTION IF EXISTS atlas_uuid_v7()")
