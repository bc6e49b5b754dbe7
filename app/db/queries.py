"""Named SQL for the hot paths, each with a one-line description.

Everything else is SQLAlchemy Core in :mod:`app.transitions`. States in these
statements come from :mod:`app.lifecycle` (interpolated constants, never input).
"""

from __future__ import annotations

from sqlalchemy import text

from app.lifecycle import DELIVERY_MOVES, AttemptOutcome, DeliveryState, JobState, Reason

_Q, _R, _CR = JobState.QUEUED.value, JobState.RUNNING.value, JobState.CANCEL_REQUESTED.value
_NOW = "(now() + make_interval(secs => :offset_seconds))"
_PUBLISHABLE_FROM = ", ".join(
    sorted(f"'{src.value}'" for src, dst in DELIVERY_MOVES if dst == DeliveryState.AVAILABLE)
)

# claim: queued -> running for up to :limit jobs, each with a new attempt id (the fencing
# token), an attempts row and a history row, in ONE statement and one short transaction.
#
# * The CTE picks rows with FOR UPDATE SKIP LOCKED so concurrent workers never wait on
#   each other and never pick the same row; LIMIT keeps the batch small.
# * ORDER BY (available_at, seq) walks ix_jobs_claimable (partial: state = 'queued') in
#   index order, so the scan stops after LIMIT matching rows whatever the table size.
# * The handler filter keeps a job that no running worker can handle visibly queued.
# * The UPDATE re-checks state = 'queued': under READ COMMITTED a row locked after a
#   concurrent change is re-evaluated, and a changed row simply drops out.
CLAIM = text(f"""
WITH picked AS (
    SELECT id
      FROM jobs
     WHERE state = '{_Q}'
       AND available_at <= {_NOW}
       AND (kind || '@' || kind_version) = ANY(CAST(:handlers AS text[]))
     ORDER BY available_at, seq
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs AS j
       SET state = '{_R}',
           reason = '{Reason.CLAIMED.value}',
           attempt = j.attempt + 1,
           charged_attempts = j.charged_attempts + 1,
           current_attempt_id = gen_random_uuid(),
           worker_id = :worker_id,
           lease_expires_at = {_NOW} + make_interval(secs => :lease_seconds),
           heartbeat_at = {_NOW},
           version = j.version + 1,
           updated_at = {_NOW}
      FROM picked
     WHERE j.id = picked.id AND j.state = '{_Q}'
 RETURNING j.*
), opened AS (
    INSERT INTO attempts (id, job_id, number, worker_id, claimed_at, lease_expires_at,
                          heartbeat_at, outcome)
    SELECT current_attempt_id, id, attempt, worker_id, updated_at, lease_expires_at,
           heartbeat_at, '{AttemptOutcome.RUNNING.value}'
      FROM claimed
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, updated_at, 'claim', '{_Q}', '{_R}', '{Reason.CLAIMED.value}', :actor,
           current_attempt_id
      FROM claimed
)
SELECT * FROM claimed ORDER BY seq
""")

# expired_leases: jobs whose lease ran out, locked for the reaper in a bounded batch.
# SKIP LOCKED lets several reapers (one per worker process) share the work; a job whose
# worker is mid-transition is skipped now and seen on the next pass.
EXPIRED_LEASES = text(f"""
SELECT id
  FROM jobs
 WHERE state IN ('{_R}', '{_CR}')
   AND lease_expires_at <= {_NOW}
 ORDER BY lease_expires_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# expired_results: published results whose retention passed, for the sweeper.
EXPIRED_RESULTS = text(f"""
SELECT id, owner
  FROM jobs
 WHERE delivery_state = 'available'
   AND delivery_expires_at <= {_NOW}
 ORDER BY delivery_expires_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")

# heartbeat_many: extend the leases of every attempt one worker holds, in one statement.
#
# * Fenced: a row matches only while the caller's attempt id is current and its lease
#   is live, so a stale worker extends nothing (and learns it from lease_status).
# * SKIP LOCKED: a row locked by a publication or a cancel in flight is skipped this
#   round, so a heartbeat never waits behind them; its lease is still live and the next
#   beat extends it. ORDER BY id keeps the lock order fixed across workers.
# * Heartbeats do not bump ``version``: they are not a visible change of the job.
HEARTBEAT_MANY = text(f"""
WITH wanted AS (
    SELECT w.job_id, w.attempt_id
      FROM unnest(CAST(:job_ids AS uuid[]), CAST(:attempt_ids AS uuid[]))
           AS w(job_id, attempt_id)
), locked AS (
    SELECT j.id
      FROM jobs AS j
      JOIN wanted AS w ON j.id = w.job_id AND j.current_attempt_id = w.attempt_id
     WHERE j.state IN ('{_R}', '{_CR}')
       AND j.lease_expires_at > {_NOW}
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
), beat AS (
    UPDATE jobs AS j
       SET lease_expires_at = {_NOW} + make_interval(secs => :lease_seconds),
           heartbeat_at = {_NOW}
      FROM locked
     WHERE j.id = locked.id
 RETURNING j.id, j.state, j.current_attempt_id, j.lease_expires_at, j.heartbeat_at
), extended AS (
    UPDATE attempts AS a
       SET lease_expires_at = beat.lease_expires_at,
           heartbeat_at = beat.heartbeat_at
      FROM beat
     WHERE a.id = beat.current_attempt_id
)
SELECT id, state FROM beat
""")

# lease_status: without locking, whether attempts still hold their jobs (used for the
# rows heartbeat_many skipped: a held row is merely locked, anything else is lost).
LEASE_STATUS = text(f"""
SELECT id, state, current_attempt_id, (lease_expires_at > {_NOW}) AS lease_live
  FROM jobs
 WHERE id = ANY(CAST(:job_ids AS uuid[]))
""")

# publish_many: the batched twin of Transitions.publish for results without files (the
# no-op kind): succeeded + available for many attempts in ONE statement, with their
# attempts ended and their history rows written -- a group commit of completions.
#
# * Fenced like publish: only rows still held by the given attempt with a live lease,
#   whose delivery may become available (never a partial package).
# * FOR UPDATE (not SKIP LOCKED), ORDER BY id: a concurrent cancel on one of the rows is
#   waited for, in a fixed lock order, and then loses (cancel_requested -> succeeded is
#   the "publication won" move); rows that no longer match are left out of RETURNING.
PUBLISH_MANY = text(f"""
WITH done AS (
    SELECT d.job_id, d.attempt_id
      FROM unnest(CAST(:job_ids AS uuid[]), CAST(:attempt_ids AS uuid[]))
           AS d(job_id, attempt_id)
), locked AS (
    SELECT j.id, j.state AS from_state, j.current_attempt_id AS attempt_id
      FROM jobs AS j
      JOIN done AS d ON j.id = d.job_id AND j.current_attempt_id = d.attempt_id
     WHERE j.state IN ('{_R}', '{_CR}')
       AND j.lease_expires_at > {_NOW}
       AND j.delivery_state IN ({_PUBLISHABLE_FROM})
     ORDER BY j.id
       FOR UPDATE OF j
), published AS (
    UPDATE jobs AS j
       SET state = '{JobState.SUCCEEDED.value}',
           reason = '{Reason.PUBLISHED.value}',
           delivery_state = 'available',
           result_ref = CAST(:result_ref AS jsonb),
           delivery_expires_at = {_NOW} + make_interval(secs => :ttl_seconds),
           finished_at = {_NOW},
           updated_at = {_NOW},
           version = j.version + 1,
           current_attempt_id = NULL,
           lease_expires_at = NULL,
           worker_id = NULL
      FROM locked
     WHERE j.id = locked.id
 RETURNING j.id, locked.from_state, locked.attempt_id, j.updated_at
), ended AS (
    UPDATE attempts AS a
       SET outcome = '{AttemptOutcome.SUCCEEDED.value}', ended_at = published.updated_at
      FROM published
     WHERE a.id = published.attempt_id
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, updated_at, 'publish', from_state, '{JobState.SUCCEEDED.value}',
           '{Reason.PUBLISHED.value}', :actor, attempt_id
      FROM published
)
SELECT id FROM published
""")

# expired_waits: waiting jobs whose deadline passed, locked in a bounded batch for the
# sweeper, which applies each job's rule (fail or escalate to unresolved).
EXPIRED_WAITS = text(f"""
SELECT id
  FROM jobs
 WHERE state = '{JobState.WAITING.value}'
   AND wait_deadline_at <= {_NOW}
 ORDER BY wait_deadline_at
 LIMIT :limit
   FOR UPDATE SKIP LOCKED
""")
