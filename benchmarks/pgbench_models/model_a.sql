-- Model A: today's drain SQL on the real schema, per batch of N (-D batch=N), as the worker
-- sends it (captured with log_statement=all from benchmarks/peer-adapter): the claim
-- (app/db/queries.py CLAIM: jobs UPDATE + attempts INSERT + 'claim' history row, one
-- autocommitted statement), then the group publication (workers/completer.py ->
-- Transitions.publish_many -> app/db/moves.py: lock, jobs UPDATE, attempt end, 'publish'
-- history row, one autocommitted statement). Bind parameters are inlined ($1 = clock
-- offset 0, worker 'bench-w', lease 30 s, result TTL 86400 s); the per-row parameter arrays
-- of the publication that are all NULL become NULL columns; the claim's final SELECT
-- aggregates ids and attempt ids (and reads the input) instead of returning the rows.
WITH picked AS (
    SELECT id
      FROM jobs
     WHERE state = 'queued'
       AND available_at <= (now() + make_interval(secs => 0))
       AND (kind || '@' || kind_version) = ANY(CAST('{atlas.noop@1}' AS text[]))
     ORDER BY available_at, seq
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE jobs AS j
       SET state = 'running',
           reason = 'claimed',
           attempt = j.attempt + 1,
           charged_attempts = j.charged_attempts + 1,
           current_attempt_id = atlas_uuid_v7(),
           worker_id = 'bench-w',
           lease_expires_at = (now() + make_interval(secs => 0)) + make_interval(secs => 30),
           heartbeat_at = (now() + make_interval(secs => 0)),
           version = j.version + 1,
           updated_at = (now() + make_interval(secs => 0))
      FROM picked
     WHERE j.id = picked.id AND j.state = 'queued'
 RETURNING j.*
), opened AS (
    INSERT INTO attempts (id, job_id, number, worker_id, claimed_at, lease_expires_at,
                          heartbeat_at, outcome)
    SELECT current_attempt_id, id, attempt, worker_id, updated_at, lease_expires_at,
           heartbeat_at, 'running'
      FROM claimed
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, updated_at, 'claim', 'queued', 'running', 'claimed', 'worker:bench-w',
           current_attempt_id
      FROM claimed
)
SELECT string_agg(id::text, ',' ORDER BY seq) AS ids,
       string_agg(current_attempt_id::text, ',' ORDER BY seq) AS aids,
       sum(octet_length(input::text)) AS bytes
  FROM claimed \gset
WITH input AS (
    SELECT i.job_id, i.attempt_id, CAST(NULL AS text) AS reason, CAST(NULL AS jsonb) AS error,
           CAST(86400 AS float8) AS seconds, CAST(NULL AS text) AS rule,
           CAST(NULL AS text) AS stage, CAST(NULL AS text) AS delivery,
           CAST('{"files": []}' AS jsonb) AS result_ref, CAST(NULL AS jsonb) AS data,
           CAST(NULL AS text) AS note, CAST(NULL AS text) AS event_id
      FROM unnest(CAST('{:ids}' AS uuid[]), CAST('{:aids}' AS uuid[])) AS i(job_id, attempt_id)
), locked AS (
    SELECT j.id, j.state AS from_state, j.current_attempt_id AS held_attempt_id
      FROM jobs AS j
      JOIN input AS i ON i.job_id = j.id
     WHERE (CAST(NULL AS text) IS NULL OR j.owner = CAST(NULL AS text))
     ORDER BY j.id
       FOR UPDATE OF j
), moved AS (
    UPDATE jobs AS j
       SET version = j.version + 1,
           updated_at = (now() + make_interval(secs => 0)),
           state = CASE locked.from_state WHEN 'cancel_requested' THEN 'succeeded' WHEN 'running' THEN 'succeeded' ELSE j.state END,
           reason = COALESCE(i.reason, CASE locked.from_state WHEN 'cancel_requested' THEN 'published' WHEN 'running' THEN 'published' ELSE j.reason END),
           finished_at = CASE locked.from_state WHEN 'cancel_requested' THEN (now() + make_interval(secs => 0)) WHEN 'running' THEN (now() + make_interval(secs => 0)) ELSE j.finished_at END,
           current_attempt_id = CASE locked.from_state WHEN 'cancel_requested' THEN NULL WHEN 'running' THEN NULL ELSE j.current_attempt_id END,
           lease_expires_at = CASE locked.from_state WHEN 'cancel_requested' THEN NULL WHEN 'running' THEN NULL ELSE j.lease_expires_at END,
           worker_id = CASE locked.from_state WHEN 'cancel_requested' THEN NULL WHEN 'running' THEN NULL ELSE j.worker_id END,
           delivery_state = 'available',
           result_ref = i.result_ref, delivery_expires_at = (now() + make_interval(secs => 0)) + make_interval(secs => i.seconds)
      FROM locked JOIN input AS i ON i.job_id = locked.id
     WHERE j.id = locked.id
       AND j.state = locked.from_state
       AND j.current_attempt_id IS NOT DISTINCT FROM locked.held_attempt_id
       AND j.state IN ('cancel_requested', 'running') AND j.current_attempt_id = i.attempt_id AND j.lease_expires_at > (now() + make_interval(secs => 0)) AND j.delivery_state IN ('none', 'staged_private')
 RETURNING j.*, locked.from_state AS moved_from, locked.held_attempt_id AS moved_attempt_id,
           i.error AS step_error, i.data AS step_data, i.note AS step_note,
           i.event_id AS step_event_id, (now() + make_interval(secs => 0)) AS observed_at
), ended AS (
    UPDATE attempts AS a
       SET outcome = 'succeeded', ended_at = (now() + make_interval(secs => 0)), error = moved.step_error
      FROM moved
     WHERE a.id = moved.moved_attempt_id
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id, event_id, note, data)
    SELECT id, (now() + make_interval(secs => 0)), 'publish', moved_from, state, reason, CAST('worker:bench-w' AS text),
           moved_attempt_id, step_event_id, step_note, step_data
      FROM moved
)
SELECT id, state, version, moved_from, moved_attempt_id, observed_at, kind, created_at, finished_at FROM moved;
