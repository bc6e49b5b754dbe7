-- Queued jobs on the REAL schema (alembic upgrade head), written as a batch create writes
-- them (app/db/queries.py CREATE: a jobs row and a 'create' history row per job; the
-- insert trigger keeps the owner's backlog): atlas.noop v1, owner 'bench', the adapter's
-- input, max_attempts 3, max_elapsed_seconds 600.  psql -v nrows=N -f prefill_atlas.sql
WITH input AS MATERIALIZED (
    SELECT atlas_uuid_v7() AS id, jsonb_build_object('tag', 'seq-' || g) AS input, g AS ord
      FROM generate_series(1, :nrows) AS g
), created AS (
    INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                      max_elapsed_seconds, created_at, updated_at, available_at,
                      budget_started_at)
    SELECT id, 'bench', 'atlas.noop', 1, input, 'queued', 'new', 3, 600,
           now(), now(), now(), now()
      FROM input
     ORDER BY ord
)
INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, actor)
SELECT id, now(), 'create', NULL, 'queued', 'new', 'client:bench' FROM input;
VACUUM ANALYZE;
