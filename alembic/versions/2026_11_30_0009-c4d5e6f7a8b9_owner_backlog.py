"""owner_backlog: the per-owner count of unfinished jobs, kept by triggers, read by admission

Revision ID: c4d5e6f7a8b9
Revises: f1a2b3c4d5e6
Create Date: 2026-11-30 01:50:00.000000+00:00

Admission (``atlas_admission_count``, revision e8f9a0b1c2d3) counted the owner's
unfinished jobs on every creation, under the owner's lock: a bitmap heap scan over up to
the cap (10,000) rows. Now statement-level triggers on ``jobs`` keep per-owner counters
exact, and admission sums them: at most SLOTS rows, whatever the backlog.

Each owner's count is split over SLOTS rows, a job counting in the slot its id picks
(so a job's +1 and -1 land on the same row, and every row stays >= 0). One row per owner
would be a hot row: every finish of one of the owner's jobs updates it and holds it to
commit, so single-job finishes of one owner by 16 connections took 1.7-2.1x the wall
time of the base (PostgreSQL CPU per finish 1.3 -> 2.0-2.6 ms: lock waits); split over
16 rows, two finishes collide only when their jobs share a slot (measured: 1.0-1.2x).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "c4d5e6f7a8b9"
down_revision: str | None = "f1a2b3c4d5e6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# app.lifecycle.TERMINAL_STATES as it is at this revision (a migration is frozen, so the
# list is written out; tests/integration/test_owner_backlog.py pins it to the lifecycle).
FINISHED = "'canceled', 'failed', 'succeeded'"
SLOTS = 16  # a power of two: the slot is low bits of the id


def slot(row: str) -> str:
    """The counter slot of a job row (``row`` is its SQL alias): the low bits of the id's
    last byte (random in a UUIDv7 or v4). Read from the bytes, not through a hash
    function, so that it never changes: not across PostgreSQL major versions either."""
    return f"(get_byte(uuid_send({row}.id), 15) & {SLOTS - 1})::smallint"


CREATE_TABLE = f"""
CREATE TABLE owner_backlog (
    owner text NOT NULL,
    slot smallint NOT NULL,
    unfinished bigint NOT NULL,
    CONSTRAINT pk_owner_backlog PRIMARY KEY (owner, slot),
    CONSTRAINT ck_owner_backlog_unfinished_not_negative CHECK (unfinished >= 0),
    CONSTRAINT ck_owner_backlog_slot_in_range CHECK (slot >= 0 AND slot < {SLOTS})
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05,
        autovacuum_vacuum_cost_delay = 0)
"""

# Every trigger adds its per-(owner, slot) deltas with ONE upsert whose rows come in
# (owner, slot) order: two statements touching several counter rows lock them in the same
# order and cannot deadlock on them. Rows whose delta is zero are left out, so a statement that
# finishes nothing (a claim, a heartbeat, progress) reads its transition tables and
# writes nothing. PostgreSQL checks the CHECK on the row proposed for insertion before it
# looks for a conflict, so the proposed row carries max(delta, 0) and the update takes
# the delta itself from the (materialized) CTE: a counter that would go negative is an
# error (the CHECK, on the updated row), loudly.
UPSERT = """
    WITH d AS MATERIALIZED ({deltas})
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT owner, slot, GREATEST(delta, 0) FROM d
     WHERE delta <> 0
     ORDER BY owner, slot
    ON CONFLICT (owner, slot) DO UPDATE
       SET unfinished = b.unfinished + (SELECT d.delta FROM d
                                         WHERE d.owner = EXCLUDED.owner
                                           AND d.slot = EXCLUDED.slot);
"""


def counting_function(name: str, deltas: str) -> str:
    """A trigger function that applies ``deltas`` (rows of owner, slot, delta) with
    :data:`UPSERT`."""
    return f"""
CREATE FUNCTION {name}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
{UPSERT.format(deltas=deltas)}
    RETURN NULL;
END
$$
"""


INSERTED = counting_function(
    "atlas_backlog_jobs_inserted",
    f"SELECT n.owner, {slot('n')} AS slot, count(*) AS delta FROM new_rows AS n "
    f"WHERE n.state NOT IN ({FINISHED}) GROUP BY 1, 2",
)

# Any update, even one that changed a job's owner (the application never does): the old
# row's contribution leaves its owner, the new row's joins its owner.
UPDATED = counting_function(
    "atlas_backlog_jobs_updated",
    f"""SELECT c.owner, {slot("o")} AS slot, sum(c.delta) AS delta
                 FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
                 CROSS JOIN LATERAL (VALUES
                     (o.owner, CASE WHEN o.state NOT IN ({FINISHED}) THEN -1 ELSE 0 END),
                     (n.owner, CASE WHEN n.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END)
                 ) AS c (owner, delta)
                WHERE (o.state IN ({FINISHED})) <> (n.state IN ({FINISHED}))
                   OR o.owner <> n.owner
                GROUP BY 1, 2""",
)

DELETED = counting_function(
    "atlas_backlog_jobs_deleted",
    f"SELECT o.owner, {slot('o')} AS slot, -count(*) AS delta FROM old_rows AS o "
    f"WHERE o.state NOT IN ({FINISHED}) GROUP BY 1, 2",
)

# TRUNCATE fires no DELETE trigger: it empties the counters with the jobs.
TRUNCATED = """
CREATE FUNCTION atlas_backlog_jobs_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM owner_backlog;
    RETURN NULL;
END
$$
"""

TRIGGERS = (
    "CREATE TRIGGER jobs_backlog_inserted AFTER INSERT ON jobs "
    "REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_inserted()",
    "CREATE TRIGGER jobs_backlog_updated AFTER UPDATE ON jobs "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_updated()",
    "CREATE TRIGGER jobs_backlog_deleted AFTER DELETE ON jobs "
    "REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_deleted()",
    "CREATE TRIGGER jobs_backlog_truncated AFTER TRUNCATE ON jobs "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_truncated()",
)

BACKFILL = f"""
INSERT INTO owner_backlog (owner, slot, unfinished)
SELECT j.owner, {slot("j")}, count(*) FROM jobs AS j
 WHERE j.state NOT IN ({FINISHED})
 GROUP BY 1, 2 ORDER BY 1, 2
"""

# Same signature and lock as before (concurrent creations of one owner stay exact: each
# waits for the previous one to commit, its counter update included). A VOLATILE
# function gives the read a snapshot taken after the lock was granted. The read is a
# primary-key range of at most SLOTS rows, whatever the owner's backlog.
ADMISSION_READ = """
CREATE OR REPLACE FUNCTION atlas_admission_count(p_owner text, up_to integer) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('admission:' || p_owner, 0));
    RETURN LEAST(COALESCE((SELECT sum(unfinished) FROM owner_backlog WHERE owner = p_owner),
                          0),
                 up_to);
END
$$
"""

# Revision e8f9a0b1c2d3's function, restored by the downgrade.
ADMISSION_COUNT = """
CREATE OR REPLACE FUNCTION atlas_admission_count(p_owner text, up_to integer) RETURNS integer
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
    # No write to jobs may slip between the triggers' creation and the backfill (it
    # would be counted twice or not at all); SHARE ROW EXCLUSIVE blocks writers, not
    # readers, until the migration commits.
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute(CREATE_TABLE)
    for function in (INSERTED, UPDATED, DELETED, TRUNCATED):
        op.execute(function)
    for trigger in TRIGGERS:
        op.execute(trigger)
    op.execute(BACKFILL)
    op.execute(ADMISSION_READ)


def downgrade() -> None:
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute(ADMISSION_COUNT)
    for trigger in ("truncated", "deleted", "updated", "inserted"):
        op.execute(f"DROP TRIGGER IF EXISTS jobs_backlog_{trigger} ON jobs")
    for function in ("truncated", "deleted", "updated", "inserted"):
        op.execute(f"DROP FUNCTION IF EXISTS atlas_backlog_jobs_{function}()")
    op.execute("DROP TABLE IF EXISTS owner_backlog")
