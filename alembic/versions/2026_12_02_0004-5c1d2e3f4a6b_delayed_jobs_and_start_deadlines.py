"""Delayed jobs and start deadlines: ``jobs.run_at``, ``jobs.start_by``, the reason
``start_deadline_passed``

``run_at`` keeps the not-before an owner asked for (creation or ``reschedule``; the claim
reads ``available_at``, which is set from it); ``start_by`` is the start deadline: a job
never claimed by then is never claimed (the claim's predicate) and the sweeper ends it
``failed`` with the new reason ``start_deadline_passed`` (``miss_start``), found on the
partial index ``ix_jobs_start_by`` (queued jobs with a deadline that never started:
nobody else pays for it). Both columns are nullable without a default: adding them
rewrites nothing. ``atlas_jobs_fits`` is replaced to allow the new reason (a frozen copy
of app.db.row_rules' output at this revision); the downgrade gives jobs that ended with
it the reason ``error`` first, then restores revision a3b4c5d6e7f8's function. A
schedule's job is timed relative to its tick: ``schedules.job_delay_seconds`` and
``job_start_within_seconds`` (nullable: existing schedules keep creating undelayed jobs).

Revision ID: 5c1d2e3f4a6b
Revises: 4e5f6a7b8c9d
Create Date: 2026-12-02 06:10:00.000000+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c1d2e3f4a6b"
down_revision: str | None = "4e5f6a7b8c9d"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# app.db.row_rules' function as it is at this revision (frozen).
JOBS_FITS = """
CREATE FUNCTION atlas_jobs_fits(p_state text, p_reason text, p_delivery text, p_finished boolean, p_result boolean, p_attempt_id boolean, p_lease boolean, p_wait_deadline boolean, p_wait_on text, p_error boolean, p_attempt integer, p_charged integer, p_max_attempts integer, p_plan_revision integer)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF (p_state IN ('cancel_requested', 'canceled', 'failed', 'queued', 'running', 'succeeded', 'unresolved', 'waiting')) IS NOT FALSE
       AND (p_delivery IN ('available', 'blocked', 'expired', 'none', 'partial_private', 'staged_private')) IS NOT FALSE
       AND ((p_state = 'cancel_requested' AND p_reason IN ('cancel_requested')) OR (p_state = 'canceled' AND p_reason IN ('canceled')) OR (p_state = 'failed' AND p_reason IN ('deadline_passed', 'error', 'operator', 'review_rejected', 'start_deadline_passed')) OR (p_state = 'queued' AND p_reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved')) OR (p_state = 'running' AND p_reason IN ('claimed')) OR (p_state = 'succeeded' AND p_reason IN ('published')) OR (p_state = 'unresolved' AND p_reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted', 'time_exhausted', 'unreconciled')) OR (p_state = 'waiting' AND p_reason IN ('external', 'review'))) IS NOT FALSE
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
    IF ((p_state = 'cancel_requested' AND p_reason IN ('cancel_requested')) OR (p_state = 'canceled' AND p_reason IN ('canceled')) OR (p_state = 'failed' AND p_reason IN ('deadline_passed', 'error', 'operator', 'review_rejected', 'start_deadline_passed')) OR (p_state = 'queued' AND p_reason IN ('event_received', 'new', 'resumed', 'retry', 'review_approved')) OR (p_state = 'running' AND p_reason IN ('claimed')) OR (p_state = 'succeeded' AND p_reason IN ('published')) OR (p_state = 'unresolved' AND p_reason IN ('deadline_escalated', 'lease_lost', 'retries_exhausted', 'time_exhausted', 'unreconciled')) OR (p_state = 'waiting' AND p_reason IN ('external', 'review'))) IS FALSE THEN
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

# Revision a3b4c5d6e7f8's function, which the downgrade restores.
JOBS_FITS_BEFORE = """
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


def upgrade() -> None:
    op.add_column("jobs", sa.Column("run_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("jobs", sa.Column("start_by", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_jobs_start_by",
        "jobs",
        ["start_by"],
        postgresql_where=sa.text("state = 'queued' AND attempt = 0 AND start_by IS NOT NULL"),
    )
    op.execute(JOBS_FITS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.add_column("schedules", sa.Column("job_delay_seconds", sa.Integer(), nullable=True))
    op.add_column("schedules", sa.Column("job_start_within_seconds", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("schedules", "job_start_within_seconds")
    op.drop_column("schedules", "job_delay_seconds")
    op.execute("UPDATE jobs SET reason = 'error' WHERE reason = 'start_deadline_passed'")
    op.execute(JOBS_FITS_BEFORE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    op.drop_index("ix_jobs_start_by", table_name="jobs")
    op.drop_column("jobs", "start_by")
    op.drop_column("jobs", "run_at")
