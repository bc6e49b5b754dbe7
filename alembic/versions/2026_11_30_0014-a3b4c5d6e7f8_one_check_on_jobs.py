"""The eleven CHECK constraints of jobs: ONE constraint, a call of ONE function

Revision ID: a3b4c5d6e7f8
Revises: b4c5d6e7f8a9
Create Date: 2026-11-30 07:30:00.000000+00:00

PostgreSQL reads every CHECK constraint of a table from its stored node tree and plans it
again on every statement that writes the table (``ExecRelCheck``: ``stringToNode``,
``expression_planner``, ``ExecPrepareExpr``): on a one-job create (PostgreSQL 18,
``perf``) 21.5 % of the backend's CPU was in ``ExecConstraints``, 13.5 % re-reading the
stored expressions, mostly the eleven of ``jobs``. Now they are the arms of an IMMUTABLE
PL/pgSQL function, ``atlas_jobs_fits`` (planned once per session), called with the
columns the rules read (whether a document is there, never the document), and
``ck_jobs_rules`` stores that one call. ``atlas_reason_fits`` (revision d0e1f2a3b4c5) is
folded into it and dropped.

Same rules, SQL's three-valued logic kept (a NULL rule passes, as in a CHECK). A row
breaking a rule is refused with ``check_violation`` naming the former constraint, worded
as PostgreSQL words it (``new row for relation "jobs" violates check constraint
"ck_jobs_lease_iff_active"``; also in the error's CONSTRAINT field), without the
"Failing row contains" detail (the row holds the job's input). app.db.row_rules
generates the function; this is a frozen copy of its output at this revision
(tests/migration/test_migrations.py compares the migrated function with it).

Backend CPU per statement (benchmarks/trigger_cpu.py, interleaved, PostgreSQL 18, load
1.7-2.2 on 2 cores, two runs with the sides swapped), e1f2a3b4c5d6 -> this revision:
one-job creates 0.90-0.91x (~37 us), claims 0.93x, heartbeats 0.95-0.96x, publications
0.96-0.97x; 100-job statements 0.95-1.02x (creates 1.02x: a PL/pgSQL call per row costs
~0.4 us more than the eleven inline expressions). ``job_history`` and ``attempts`` keep
their two inline CHECKs each: folded the same way, one-job statements gained 1-5 % but
100-row statements lost 1-3 % (app.db.row_rules says why). Re-adding a constraint checks
every row, holding the table's lock.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "a3b4c5d6e7f8"
down_revision: str | None = "b4c5d6e7f8a9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# app.db.row_rules' functions and constraints as they are at this revision (frozen).
JOBS_FITS = """
CREATE FUNCTION atlas_jobs_fits(p_state text, p_reason text, p_delivery text, p_finished boolean, p_result boolean, p_attempt_id boolean, p_lease boolean, p_wait_deadline boolean, p_wait_on text, p_error boolean, p_attempt integer, p_charged integer, p_max_attempts integer, p_plan_revision integer)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF (p_state IN ('cancel_requested', 'canceled', 'failed', 'queued', 'running', 'succeeded', 'unresolved', 'waiting')) IS NOT FALSE
       AND (p_delivery IN ('available', 'blocked', 'expired', 'none', 'partial_private', 'staged_private')) IS NOT FALSE
       AND ((p_state = 'cancel_requested' AND p_reason IN ('cancel_requested')) OR (p_state = 'canceled' AND p_reason IN ('canceled')) OR (p_state = 'failed' AND p_reason IN ('deadline_passed', 'error', 'operator', 'review_rejected')) OR (p_state = 'queued' AND p_reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved')) OR (p_state = 'running' AND p_reason IN ('claimed')) OR (p_state = 'succeeded' AND p_reason IN ('published')) OR (p_state = 'unresolved' AND p_reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted', 'time_exhausted', 'unreconciled')) OR (p_state = 'waiting' AND p_reason IN ('external', 'review'))) IS NOT FALSE
       AND (p_delivery <> 'blocked' OR p_state IN ('failed', 'canceled')) IS NOT FALSE
       AND (p_attempt >= 0 AND p_charged >= 0 AND p_max_attempts >= 1 AND p_plan_revision >= 0) IS NOT FALSE
       AND (p_state <> 'failed' OR p_error) IS NOT FALSE
       AND ((p_state IN ('running', 'cancel_requested')) = p_attempt_id AND (p_state IN ('running', 'cancel_requested')) = p_lease) IS NOT FALSE
       AND (p_delivery NOT IN ('available', 'expired') OR (p_state = 'succeeded' AND p_result)) IS NOT FALSE
       AND (p_state <> 'succeeded' OR p_delivery IN ('available', 'expired')) IS NOT FALSE
       AND ((p_state IN ('canceled', 'failed', 'succeeded')) = p_finished) IS NOT FALSE
       AND (p_state <> 'waiting' OR (p_wait_deadline AND p_wait_on IN ('escalate', 'fail'))) IS NOT FALSE THEN
        RETURN true;
    END IF;
    IF (p_state IN ('cancel_requested', 'canceled', 'failed', 'queued', 'running', 'succeeded', 'unresolved', 'waiting')) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_state_known', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_state_known"';
    END IF;
    IF (p_delivery IN ('available', 'blocked', 'expired', 'none', 'partial_private', 'staged_private')) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_delivery_state_known', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_delivery_state_known"';
    END IF;
    IF ((p_state = 'cancel_requested' AND p_reason IN ('cancel_requested')) OR (p_state = 'canceled' AND p_reason IN ('canceled')) OR (p_state = 'failed' AND p_reason IN ('deadline_passed', 'error', 'operator', 'review_rejected')) OR (p_state = 'queued' AND p_reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved')) OR (p_state = 'running' AND p_reason IN ('claimed')) OR (p_state = 'succeeded' AND p_reason IN ('published')) OR (p_state = 'unresolved' AND p_reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted', 'time_exhausted', 'unreconciled')) OR (p_state = 'waiting' AND p_reason IN ('external', 'review'))) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_reason_matches_state', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_reason_matches_state"';
    END IF;
    IF (p_delivery <> 'blocked' OR p_state IN ('failed', 'canceled')) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_blocked_only_when_abandoned', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_blocked_only_when_abandoned"';
    END IF;
    IF (p_attempt >= 0 AND p_charged >= 0 AND p_max_attempts >= 1 AND p_plan_revision >= 0) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_counters_nonnegative', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_counters_nonnegative"';
    END IF;
    IF (p_state <> 'failed' OR p_error) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_failed_has_error', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_failed_has_error"';
    END IF;
    IF ((p_state IN ('running', 'cancel_requested')) = p_attempt_id AND (p_state IN ('running', 'cancel_requested')) = p_lease) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_lease_iff_active', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_lease_iff_active"';
    END IF;
    IF (p_delivery NOT IN ('available', 'expired') OR (p_state = 'succeeded' AND p_result)) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_published_only_when_succeeded', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_published_only_when_succeeded"';
    END IF;
    IF (p_state <> 'succeeded' OR p_delivery IN ('available', 'expired')) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_succeeded_has_published', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_succeeded_has_published"';
    END IF;
    IF ((p_state IN ('canceled', 'failed', 'succeeded')) = p_finished) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_terminal_iff_finished', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_terminal_iff_finished"';
    END IF;
    IF (p_state <> 'waiting' OR (p_wait_deadline AND p_wait_on IN ('escalate', 'fail'))) IS FALSE THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', TABLE = 'jobs',
            CONSTRAINT = 'ck_jobs_waiting_has_deadline', MESSAGE = 'new row for relation "jobs" violates check constraint "ck_jobs_waiting_has_deadline"';
    END IF;
    RETURN true;
END
$$
"""
JOBS_CHECK = "CHECK (atlas_jobs_fits(state, reason, delivery_state, finished_at IS NOT NULL, result_ref IS NOT NULL, current_attempt_id IS NOT NULL, lease_expires_at IS NOT NULL, wait_deadline_at IS NOT NULL, wait_on_deadline, error IS NOT NULL, attempt, charged_attempts, max_attempts, plan_revision))"


# -- what the downgrade restores: the constraints as revision e1f2a3b4c5d6 has them
# (pg_get_constraintdef), and revision d0e1f2a3b4c5's atlas_reason_fits ------------------

# app.db.schema.REASON_FITS_FUNCTION as revision d0e1f2a3b4c5 wrote it.
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

OLD_CHECKS = (
    (
        "ck_jobs_blocked_only_when_abandoned",
        "CHECK (((delivery_state <> 'blocked'::text) OR (state = ANY (ARRAY['failed'::text, 'canceled'::text]))))",
    ),
    (
        "ck_jobs_counters_nonnegative",
        "CHECK (((attempt >= 0) AND (charged_attempts >= 0) AND (max_attempts >= 1) AND (plan_revision >= 0)))",
    ),
    (
        "ck_jobs_delivery_state_known",
        "CHECK ((delivery_state = ANY (ARRAY['available'::text, 'blocked'::text, 'expired'::text, 'none'::text, 'partial_private'::text, 'staged_private'::text])))",
    ),
    ("ck_jobs_failed_has_error", "CHECK (((state <> 'failed'::text) OR (error IS NOT NULL)))"),
    (
        "ck_jobs_lease_iff_active",
        "CHECK ((((state = ANY (ARRAY['running'::text, 'cancel_requested'::text])) = (current_attempt_id IS NOT NULL)) AND ((state = ANY (ARRAY['running'::text, 'cancel_requested'::text])) = (lease_expires_at IS NOT NULL))))",
    ),
    (
        "ck_jobs_published_only_when_succeeded",
        "CHECK (((delivery_state <> ALL (ARRAY['available'::text, 'expired'::text])) OR ((state = 'succeeded'::text) AND (result_ref IS NOT NULL))))",
    ),
    ("ck_jobs_reason_matches_state", "CHECK (atlas_reason_fits(state, reason))"),
    (
        "ck_jobs_state_known",
        "CHECK ((state = ANY (ARRAY['cancel_requested'::text, 'canceled'::text, 'failed'::text, 'queued'::text, 'running'::text, 'succeeded'::text, 'unresolved'::text, 'waiting'::text])))",
    ),
    (
        "ck_jobs_succeeded_has_published",
        "CHECK (((state <> 'succeeded'::text) OR (delivery_state = ANY (ARRAY['available'::text, 'expired'::text]))))",
    ),
    (
        "ck_jobs_terminal_iff_finished",
        "CHECK (((state = ANY (ARRAY['canceled'::text, 'failed'::text, 'succeeded'::text])) = (finished_at IS NOT NULL)))",
    ),
    (
        "ck_jobs_waiting_has_deadline",
        "CHECK (((state <> 'waiting'::text) OR ((wait_deadline_at IS NOT NULL) AND (wait_on_deadline = ANY (ARRAY['fail'::text, 'escalate'::text])))))",
    ),
)


def upgrade() -> None:
    op.execute(JOBS_FITS)
    drops = ", ".join(f"DROP CONSTRAINT {name}" for name, _ in OLD_CHECKS)
    op.execute(f"ALTER TABLE jobs {drops}, ADD CONSTRAINT ck_jobs_rules {JOBS_CHECK}")
    op.execute("DROP FUNCTION atlas_reason_fits(text, text)")


def downgrade() -> None:
    op.execute(REASON_FITS)
    adds = ", ".join(f"ADD CONSTRAINT {name} {check}" for name, check in OLD_CHECKS)
    op.execute(f"ALTER TABLE jobs DROP CONSTRAINT ck_jobs_rules, {adds}")
    op.execute("DROP FUNCTION atlas_jobs_fits")
