-- The baseline table of the shared peer harness (outside this repository, which runs
-- PGQueuer, Procrastinate and pgbench on one PostgreSQL; there it is pgbench/schema.sql),
-- same prefill.
-- psql -v nrows=N -f schema_baseline.sql
CREATE TABLE jobs (
    id      bigserial PRIMARY KEY,
    state   text  NOT NULL DEFAULT 'queued',   -- queued -> running -> done
    payload jsonb NOT NULL DEFAULT '{}'
);
INSERT INTO jobs (payload) SELECT jsonb_build_object('seq', g) FROM generate_series(1, :nrows) AS g;
CREATE INDEX jobs_queued_id_idx ON jobs (id) WHERE state = 'queued';
VACUUM ANALYZE jobs;
