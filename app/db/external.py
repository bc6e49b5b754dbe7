"""Named SQL of the human and external half of the lifecycle: external operation
records, per-destination concurrency slots, received signals, late decisions.

* ``external_operations`` -- one row per operation (id = f(job id, step)), written in
  the same transaction as its ``record_operation`` history entry;
* destination slots -- session advisory locks ``(hashtext('atlas.destination:' || name),
  slot)``: at most ``concurrency`` of them exist per destination, across every worker
  process; a process that dies loses its session, and with it its slots;
* ``job_signals`` -- one row per ``(job, event id)``: a repeated event answers the
  first outcome;
* a late decision -- recorded (``decision_too_late``) beside the job, never moving it.
"""

from __future__ import annotations

from sqlalchemy import text

from atlas_jobs._app.clock import NOW_SQL
from atlas_jobs._app.lifecycle import DECISION_TOO_LATE

_NOW = NOW_SQL

# upsert_operation: the operation's new state and counters, its last answer.
UPSERT_OPERATION = text(f"""
INSERT INTO external_operations AS o
       (id, job_id, step, destination, state, sends, checks, last_http_status,
        last_error_class, receipt, created_at, updated_at)
VALUES (:id, :job_id, :step, :destination, :state, :sends, :checks, :http_status,
        :error_class, CAST(:receipt AS jsonb), {_NOW}, {_NOW})
ON CONFLICT (id) DO UPDATE
   SET state = EXCLUDED.state,
       sends = o.sends + EXCLUDED.sends,
       checks = o.checks + EXCLUDED.checks,
       last_http_status = EXCLUDED.last_http_status,
       last_error_class = EXCLUDED.last_error_class,
       receipt = COALESCE(EXCLUDED.receipt, o.receipt),
       updated_at = {_NOW}
RETURNING o.*
""")

# get_operation: one operation's record (what an attempt knows before calling again).
GET_OPERATION = text("SELECT * FROM external_operations WHERE id = :id")

# try_destination_slot: take slot :slot of destination :name if free (session lock).
TRY_DESTINATION_SLOT = text(
    "SELECT pg_try_advisory_lock(hashtext('atlas.destination:' || :name), :slot) AS taken"
)

# release_destination_slot: give a slot back.
RELEASE_DESTINATION_SLOT = text(
    "SELECT pg_advisory_unlock(hashtext('atlas.destination:' || :name), :slot) AS released"
)

# lock_waiting_job: the job row first (the lock order), scoped to an owner when given.
LOCK_JOB = text(f"""
SELECT id, state, reason, (wait_deadline_at <= {_NOW}) IS TRUE AS deadline_passed
  FROM jobs
 WHERE id = :job_id AND (CAST(:owner AS text) IS NULL OR owner = CAST(:owner AS text))
   FOR UPDATE
""")

# find_signal: the first outcome of an event id already received for this job.
FIND_SIGNAL = text("SELECT * FROM job_signals WHERE job_id = :job_id AND event_id = :event_id")

# record_signal: the event id, once, with the outcome it had.
RECORD_SIGNAL = text(f"""
INSERT INTO job_signals (job_id, event_id, received_at, actor, data, outcome)
VALUES (:job_id, :event_id, {_NOW}, :actor, CAST(:data AS jsonb), CAST(:outcome AS jsonb))
RETURNING *
""")

# late_decision: a decision that lost to the deadline, recorded beside the job (``to`` =
# ``from``); the same actor repeating it while that row is the job's last counts up.
LATE_DECISION = text(f"""
WITH last AS (
    SELECT seq FROM job_history WHERE job_id = :job_id ORDER BY seq DESC LIMIT 1
), repeated AS (
    UPDATE job_history AS h
       SET data = jsonb_build_object(
               'count', COALESCE(CAST(h.data ->> 'count' AS integer), 1) + 1,
               'last_at', {_NOW})
      FROM last
     WHERE h.job_id = :job_id AND h.seq = last.seq
       AND h.reason = '{DECISION_TOO_LATE}' AND h.actor = :actor
       AND h.transition = :transition
 RETURNING h.seq
)
INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                         event_id, note)
SELECT :job_id, {_NOW}, :transition, :state, :state, '{DECISION_TOO_LATE}', :actor,
       :event_id, :note
 WHERE NOT EXISTS (SELECT 1 FROM repeated)
""")

# last_decision: the review decision that took effect last on a job, if any (a late
# decision's row names the move too, but never changed the state: from = to).
LAST_DECISION = text("""
SELECT transition FROM job_history
 WHERE job_id = :job_id AND transition IN ('approve', 'reject')
   AND from_state IS DISTINCT FROM to_state
 ORDER BY seq DESC
 LIMIT 1
""")

# has_transition: whether a job's history holds a move of this name (e.g. its approval).
# (A late decision's row names the move too, but never changes the state.)
HAS_TRANSITION = text("""
SELECT EXISTS (SELECT 1 FROM job_history
                WHERE job_id = :job_id AND transition = :name
                  AND from_state IS DISTINCT FROM to_state) AS found
""")
