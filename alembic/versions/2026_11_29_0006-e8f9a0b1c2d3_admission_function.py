"""admission: the owner's lock and the count of its unfinished jobs in one round trip

Revision ID: e8f9a0b1c2d3
Revises: c5d6e7f8a920
Create Date: 2026-11-29 19:15:00.000000+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "e8f9a0b1c2d3"
down_revision: str | None = "c5d6e7f8a920"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Takes the owner's admission lock (held to the end of the calling transaction), THEN
# counts the owner's unfinished jobs, at most `up_to` of them, along the partial index
# ix_jobs_owner_active (its predicate spelled as in the index, so the planner uses it).
# A VOLATILE function gives each of its queries a fresh snapshot: the count sees every
# creation committed while this call waited for the lock -- in one statement from the
# client, the snapshot would predate the wait and the cap could be overshot.
ADMISSION_COUNT = """
CREATE FUNCTION atlas_admission_count(p_owner text, up_to integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('admission:' || p_owner, 0));
    RETURN (SELECT count(*)
              FROM (SELECT 1
                      FROM jobs
                     WHERE jobs.owner = p_owner
                       AND jobs.state NOT IN ('canceled', 'failed', 'succeeded')
                     LIMIT up_to) AS unfinished);
END
$$
"""


def upgrade() -> None:
    op.execute(ADMISSION_COUNT)


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS atlas_admission_count(text, integer)")
