-- Model B1 (schema_narrow.sql): the claim UPDATEs narrow live rows (the attempt folded in,
-- a 'claim' history row carrying the fencing token), reading the job's input from the wide
-- row; the publication locks and DELETEs the live rows it still holds (fence: same attempt,
-- lease not expired), writes the wide row once (its end state, as model A's publication
-- does) and a 'publish' history row. Each is one autocommitted statement, as in model A.
WITH picked AS (
    SELECT id
      FROM live_jobs
     WHERE state = 'queued'
       AND available_at <= (now() + make_interval(secs => 0))
       AND (kind || '@' || kind_version) = ANY(CAST('{atlas.noop@1}' AS text[]))
     ORDER BY available_at, seq
     LIMIT :batch
       FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE live_jobs AS l
       SET state = 'running',
           attempt = l.attempt + 1,
           charged_attempts = l.charged_attempts + 1,
           attempt_id = atlas_uuid_v7(),
           worker_id = 'bench-w',
           lease_expires_at = (now() + make_interval(secs => 0)) + make_interval(secs => 30),
           heartbeat_at = (now() + make_interval(secs => 0))
      FROM picked
     WHERE l.id = picked.id AND l.state = 'queued'
 RETURNING l.*
), recorded AS (
    INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor,
                             attempt_id)
    SELECT id, heartbeat_at, 'claim', 'queued', 'running', 'claimed', 'worker:bench-w',
           attempt_id
      FROM claimed
)
SELECT string_agg(c.id::text, ',' ORDER BY c.seq) AS ids,
       string_agg(c.attempt_id::text, ',' ORDER BY c.seq) AS aids,
       sum(octet_length(j.input::text)) AS bytes, max(j.max_attempts) AS max_attempts
  FROM claimed AS c JOIN jobs AS j ON j.id = c.id \gset
WITH input AS (
    SELECT i.job_id, i.attempt_id, CAST(86400 AS float8) AS seconds,
           CAST('{"files": []}' AS jsonb) AS result_ref
      FROM unnest(CAST('{:ids}' AS uuid[]), CAST('{:aids}' AS uuid[])) AS i(job_id, attempt_id)
), locked AS (
    SELECT l.id
      FROM live_jobs AS l
      JOIN input AS i ON i.job_id = l.id
     ORDER BY l.id
       FOR UPDATE OF l
), ended AS (
    DELETE FROM live_jobs AS l
     USING locked, input AS i
     WHERE l.id = locked.id AND i.job_id = l.id
       AND l.state IN ('cancel_requested', 'running') AND l.attempt_id = i.attempt_id
       AND l.lease_expires_at > (now() + make_interval(secs => 0))
 RETURNING l.id, l.state AS from_state, l.attempt_id, l.attempt, l.charged_attempts,
           i.seconds, i.result_ref
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
