"""Named SQL for the hot paths, each with a one-line description.

Everything else is SQLAlchemy Core in :mod:`app.transitions`. States in these
statements come from :mod:`app.lifecycle` (interpolated constants, never input).
"""

from __future__ import annotations

from sqlalchemy import text

from app.lifecycle import AttemptOutcome, JobState, Reason

_Q, _R, _CR = JobState.QUEUED.value, JobState.RUNNING.value, JobState.CANCEL_REQUESTED.value
_NOW = "(now() + make_interval(secs => :offset_seconds))"

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

# blocked_outputs: private outputs of failed or canceled jobs still on disk.
BLOCKED_OUTPUTS = text("""
SELECT id, owner
  FROM jobs
 WHERE delivery_state = 'blocked'
   AND finished_at <= now()
 ORDER BY finished_at
 LIMIT :limit
""")
