-- Model B2 (schema_narrow.sql): inserts and deletes only. The claim DELETEs ready rows and
-- INSERTs lease rows (the attempt folded in; a 'claim' history row carrying the fencing
-- token), reading the job's input from the wide row; the publication locks and DELETEs the
-- leases it still holds (fence: same attempt, lease not expired), writes the wide row once
-- and a 'publish' history row. Each is one autocommitted statement, as in model A.
WITH picked AS (
    SELECT ctid, id, seq, attempt, charged_attempts
      FROM ready_jobs
     WHERE available_at <= (now() + make_interval(secs => 0))
       AND (kind || '@' || kind_version) = ANY(CAST('{atlas.noop@1}' AS text[]))
     ORDER BY available_at, seq
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), taken AS (
    DELETE FROM ready_jobs AS r
     WHERE r.ctid = ANY(ARRAY(SELECT ctid FROM picked))
 RETURNING r.id, r.seq, r.attempt, r.charged_attempts
), claimed AS (
    INSERT INTO leases (job_id, state, attempt, charged_attempts, attempt_id, worker_id,
                        claimed_at, lease_expires_at, heartbeat_at)
    SELECT id, 'running', attempt + 1, charged_attempts + 1, atlas_uuid_v7(), 'bench-w',
           (now() + make_interval(secs => 0)),
           (now() + make_interval(secs => 0)) + make_interval(secs => 30),
           (now() + make_interval(secs => 0))
      FROM taken
 RETURNING job_id AS id, attempt_id, claimed_at
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, claimed_at, 'claim', 'queued', 'running', 'claimed', 'worker:bench-w',
           attempt_id
      FROM claimed
)
SELECT string_agg(c.id::text, ',' ORDER BY j.seq) AS ids,
       string_agg(c.attempt_id::text, ',' ORDER BY j.seq) AS aids,
       sum(octet_length(j.input::text)) AS bytes, max(j.max_attempts) AS max_attempts
  FROM claimed AS c JOIN jobs AS j ON j.id = c.id \gset
WITH input AS (
    SELECT i.job_id, i.attempt_id, CAST(86400 AS float8) AS seconds,
           CAST('{"files": []}' AS jsonb) AS result_ref
      FROM unnest(CAST('{:ids}' AS uuid[]), CAST('{:aids}' AS uuid[])) AS i(job_id, attempt_id)
), locked AS (
    SELECT l.job_id
      FROM leases AS l
      JOIN input AS i ON i.job_id = l.job_id
     ORDER BY l.job_id
       FOR UPDATE OF l
), ended AS (
    DELETE FROM leases AS l
     USING locked, input AS i
     WHERE l.job_id = locked.job_id AND i.job_id = l.job_id
       AND l.state IN ('cancel_requested', 'running') AND l.attempt_id = i.attempt_id
       AND l.lease_expires_at > (now() + make_interval(secs => 0))
 RETURNING l.job_id AS id, l.state AS from_state, l.attempt_id, l.attempt,
           l.charged_attempts, i.seconds, i.result_ref
), moved AS (
    UPDATE jobs AS j
       SET version = j.version + 2,
           updated_at = (now() + make_interval(secs => 0)),
           state = 'succeeded',
           reason = 'published',
           finished_at = (now() + make_interval(secs => 0)),
           attempt = e.attempt,
           charged_attempts = e.charged_attempts,
           delivery_state = 'available',
           result_ref = e.result_ref,
           delivery_expires_at = (now() + make_interval(secs => 0)) + make_interval(secs => e.seconds)
      FROM ended AS e
     WHERE j.id = e.id
 RETURNING j.id, j.state, j.reason, e.from_state, e.attempt_id
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, (now() + make_interval(secs => 0)), 'publish', from_state, state, reason,
           'worker:bench-w', attempt_id
      FROM moved
)
SELECT id, state, from_state, attempt_id FROM moved;
