-- The pgbench claim-batch baseline of the shared peer harness (outside this repository,
-- which runs PGQueuer, Procrastinate and pgbench on one PostgreSQL; there it is
-- pgbench/claim_batch.sql) with the batch as a variable (-D batch=N): one claim
-- transaction of N rows, one completion transaction.
WITH c AS (SELECT id FROM jobs WHERE state = 'queued' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT :batch), u AS (UPDATE jobs SET state = 'running' FROM c WHERE jobs.id = c.id RETURNING jobs.id) SELECT string_agg(id::text, ',') AS ids FROM u \gset
UPDATE jobs SET state = 'done' WHERE id IN (:ids);
