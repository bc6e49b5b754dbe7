"""Lighter writes to jobs: one insert trigger, the state/reason rule as a function

Revision ID: d0e1f2a3b4c5
Revises: c4d5e6f7a8b9
Create Date: 2026-11-30 04:20:00.000000+00:00

**One insert trigger.** An insert into ``jobs`` fired two statement-level triggers:
``jobs_notify_inserted`` (``atlas_job_changed`` with the new ids, ``atlas_work`` with the
queued kinds) and ``jobs_backlog_inserted`` (the owner's counters). Now ONE trigger does
both, in one function call:

* ``atlas_work`` with each kind a statement queued -- the workers' wake-up, unchanged;
* no ``atlas_job_changed``: that channel wakes readers watching a job (``Prefer: wait``,
  event streams), and a job nobody could read before its creation committed has no
  watcher (a read of an unknown id answers 404 and holds nothing). Every API process
  listens on that channel, so each creation woke each of them for nothing;
* the counters: an insert only adds, so the upsert takes its delta from ``EXCLUDED``,
  without the materialized CTE and sub-select the update and delete triggers need.

Measured on one create (EXPLAIN ANALYZE, throwaway PG15): the two triggers took
0.08-0.1 ms, the one 0.05-0.06 ms, and the commit queues one notification instead of two.

**ck_jobs_reason_matches_state calls atlas_reason_fits(state, reason).** PostgreSQL
reads a table's CHECK constraints from their stored node trees and plans them again on
every statement that writes the table; this one, inline, was ~10 kB of node text with
four arrays to fold: ~40 us of server CPU on every INSERT or UPDATE of ``jobs`` (one-row
INSERT into a copy of ``jobs`` without indexes: 32 us without CHECKs, 70 us with this one
alone, 36 us with it as this function). Same rule, same name; an IMMUTABLE PL/pgSQL
function is planned once per session. Re-adding the constraint checks every row (the
``jobs`` lock is held meanwhile).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "d0e1f2a3b4c5"
down_revision: str | None = "c4d5e6f7a8b9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of what revision c4d5e6f7a8b9 wrote (tests/integration/test_owner_backlog.py
# pins FINISHED to the lifecycle, and the slot to that revision's).
FINISHED = "'canceled', 'failed', 'succeeded'"
SLOTS = 16
SLOT = f"(get_byte(uuid_send(n.id), 15) & {SLOTS - 1})::smallint"

# The counter rows come in (owner, slot) order, as in every counting trigger: two
# statements touching several counter rows lock them in the same order.
INSERTED = f"""
CREATE FUNCTION atlas_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT kind FROM new_rows WHERE state = 'queued') AS kinds;
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT n.owner, {SLOT}, count(*)
      FROM new_rows AS n
     WHERE n.state NOT IN ({FINISHED})
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    RETURN NULL;
END
$$
"""

# app.db.schema.REASON_FITS_FUNCTION as it is at this revision (frozen; the vocabulary
# test compares what the constraint accepts with app.lifecycle.STATE_REASONS).
REASON_FITS = """
CREATE FUNCTION atlas_reason_fits(p_state text, p_reason text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (p_state = 'cancel_requested' AND p_reason IN ('cancel_requested'))
        OR (p_state = 'canceled' AND p_reason IN ('canceled'))
        OR (p_state = 'failed'
            AND p_reason IN ('deadline_passed', 'error', 'operator', 'review_rejected'))
        OR (p_state = 'queued'
            AND p_reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved'))
        OR (p_state = 'running' AND p_reason IN ('claimed'))
        OR (p_state = 'succeeded' AND p_reason IN ('published'))
        OR (p_state = 'unresolved'
            AND p_reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted',
                             'time_exhausted', 'unreconciled'))
        OR (p_state = 'waiting' AND p_reason IN ('external', 'review'));
END
$$
"""
REASON_CHECK = "CHECK (atlas_reason_fits(state, reason))"
# The inline rule the downgrade restores (revision f6248ed09853's constraint).
INLINE_REASON_CHECK = """CHECK (
       (state = 'cancel_requested' AND reason IN ('cancel_requested'))
    OR (state = 'canceled' AND reason IN ('canceled'))
    OR (state = 'failed' AND reason IN ('deadline_passed', 'error', 'operator', 'review_rejected'))
    OR (state = 'queued'
        AND reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved'))
    OR (state = 'running' AND reason IN ('claimed'))
    OR (state = 'succeeded' AND reason IN ('published'))
    OR (state = 'unresolved'
        AND reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted', 'time_exhausted',
                       'unreconciled'))
    OR (state = 'waiting' AND reason IN ('external', 'review')))"""
REPLACE_REASON_CHECK = (
    "ALTER TABLE jobs DROP CONSTRAINT ck_jobs_reason_matches_state, "
    "ADD CONSTRAINT ck_jobs_reason_matches_state {check}"
)

TRIGGER = (
    "CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs "
    "REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_jobs_inserted()"
)

# -- what the downgrade restores: the two triggers as revisions f6248ed09853 and
# c4d5e6f7a8b9 wrote them ----------------------------------------------------------------

NOTIFY_INSERTED = """
CREATE FUNCTION atlas_notify_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_job_changed', ids)
       FROM (SELECT string_agg(id::text, ',') AS ids
               FROM (SELECT id, (row_number() OVER () - 1) / 100 AS chunk
                       FROM new_rows) AS numbered
              GROUP BY chunk) AS chunks;
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT kind FROM new_rows WHERE state = 'queued') AS kinds;
    RETURN NULL;
END
$$
"""

BACKLOG_INSERTED = f"""
CREATE FUNCTION atlas_backlog_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS MATERIALIZED (SELECT n.owner, {SLOT} AS slot, count(*) AS delta
                              FROM new_rows AS n
                             WHERE n.state NOT IN ({FINISHED}) GROUP BY 1, 2)
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT owner, slot, GREATEST(delta, 0) FROM d
     WHERE delta <> 0
     ORDER BY owner, slot
    ON CONFLICT (owner, slot) DO UPDATE
       SET unfinished = b.unfinished + (SELECT d.delta FROM d
                                         WHERE d.owner = EXCLUDED.owner
                                           AND d.slot = EXCLUDED.slot);
    RETURN NULL;
END
$$
"""

OLD_TRIGGERS = (
    "CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON jobs "
    "REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_notify_jobs_inserted()",
    "CREATE TRIGGER jobs_backlog_inserted AFTER INSERT ON jobs "
    "REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_inserted()",
)


def upgrade() -> None:
    # No insert may slip between dropping the old triggers and creating the new one (its
    # job would go uncounted); SHARE ROW EXCLUSIVE blocks writers, not readers.
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute(INSERTED)
    op.execute("DROP TRIGGER jobs_notify_inserted ON jobs")
    op.execute("DROP TRIGGER jobs_backlog_inserted ON jobs")
    op.execute(TRIGGER)
    op.execute("DROP FUNCTION atlas_notify_jobs_inserted()")
    op.execute("DROP FUNCTION atlas_backlog_jobs_inserted()")
    op.execute(REASON_FITS)
    op.execute(REPLACE_REASON_CHECK.format(check=REASON_CHECK))


def downgrade() -> None:
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute(NOTIFY_INSERTED)
    op.execute(BACKLOG_INSERTED)
    op.execute("DROP TRIGGER jobs_inserted ON jobs")
    for trigger in OLD_TRIGGERS:
        op.execute(trigger)
    op.execute("DROP FUNCTION atlas_jobs_inserted()")
    op.execute(REPLACE_REASON_CHECK.format(check=INLINE_REASON_CHECK))
    op.execute("DROP FUNCTION atlas_reason_fits(text, text)")
