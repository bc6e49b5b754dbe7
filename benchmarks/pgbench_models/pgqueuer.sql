-- PGQueuer 1.6.0's drain, per batch of N (-D batch=N = its batch_size), as its worker sends
-- it (captured with log_statement=all from peers/pgqueuer_bench.py of the shared peer
-- harness -- outside this repository, which runs PGQueuer, Procrastinate and pgbench on
-- one PostgreSQL): the dequeue (claim UPDATE + a 'picked' log row), then the completion
-- (DELETE + a log row).
-- Only the bind parameters are inlined; the final SELECT aggregates the ids (and reads the
-- payload) instead of returning the rows.
WITH
available AS (
    SELECT UNNEST('{noop}'::text[]) AS entrypoint
),
next_queued AS (
    SELECT job.id, job.priority
    FROM available
    CROSS JOIN LATERAL (
        SELECT candidate.id, candidate.priority
        FROM pgqueuer candidate
        WHERE candidate.entrypoint = available.entrypoint
          AND candidate.status = 'queued'
          AND candidate.execute_after < NOW()
        ORDER BY candidate.priority DESC, candidate.id ASC
        LIMIT :batch
        FOR UPDATE SKIP LOCKED
    ) job
    ORDER BY job.priority DESC, job.id ASC
    LIMIT :batch
),
next_stale AS (
    SELECT stale.id, stale.priority
    FROM pgqueuer stale
    WHERE stale.status = 'picked'
      AND stale.entrypoint = ANY('{noop}'::text[])
      AND stale.heartbeat < NOW() - '00:00:30'::interval
      AND stale.execute_after < NOW()
    ORDER BY stale.priority DESC, stale.id ASC
    FOR UPDATE SKIP LOCKED
    LIMIT :batch
),
eligible AS (
    SELECT id FROM (
        SELECT id, priority FROM next_queued
        UNION ALL
        SELECT id, priority FROM next_stale
    ) combined
    ORDER BY priority DESC, id ASC
    LIMIT :batch
),
claimed AS (
    UPDATE pgqueuer
    SET status = 'picked',
        updated   = NOW(),
        heartbeat = NOW(),
        queue_manager_id = '93bac99d-b910-4d76-b519-1f44072843fb'
    WHERE id IN (SELECT id FROM eligible)
    RETURNING *
),
log_pick AS (
    INSERT INTO pgqueuer_log (job_id, status, entrypoint, priority)
    SELECT id, status, entrypoint, priority FROM claimed
)
SELECT string_agg(id::text, ',') AS ids, sum(octet_length(payload)) AS bytes FROM claimed \gset
WITH job_status AS (
    SELECT
        UNNEST('{:ids}'::bigint[])                            AS id,
        UNNEST(array_fill('successful'::pgqueuer_status, ARRAY[cardinality('{:ids}'::bigint[])])) AS status,
        UNNEST(array_fill(NULL::jsonb, ARRAY[cardinality('{:ids}'::bigint[])])) AS traceback
), deleted AS (
    DELETE FROM pgqueuer
    WHERE id = ANY(SELECT js.id FROM job_status js WHERE js.status != 'failed')
    RETURNING id, entrypoint, priority
), held AS (
    UPDATE pgqueuer
    SET status = 'failed', updated = NOW(), queue_manager_id = NULL
    WHERE id = ANY(SELECT js.id FROM job_status js WHERE js.status = 'failed')
    RETURNING id, entrypoint, priority
), all_resolved AS (
    SELECT id, entrypoint, priority FROM deleted
    UNION ALL
    SELECT id, entrypoint, priority FROM held
), merged AS (
    SELECT
        job_status.id           AS id,
        job_status.status       AS status,
        job_status.traceback    AS traceback,
        all_resolved.entrypoint AS entrypoint,
        all_resolved.priority   AS priority
    FROM job_status
    INNER JOIN all_resolved
        ON all_resolved.id = job_status.id
)
INSERT INTO pgqueuer_log (
    job_id,
    status,
    entrypoint,
    priority,
    traceback
)
SELECT id, status, entrypoint, priority, traceback FROM merged;
