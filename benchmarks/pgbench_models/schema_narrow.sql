-- Model B: narrow tables of live work beside the real schema (run after prefill_atlas.sql,
-- whose queued jobs it copies). The wide `jobs` row is written at creation and once more at
-- the end; the drain's claims touch only the narrow rows. The attempt is folded into the
-- live row (attempt_id is the fencing token; the 'claim' and 'publish' history rows carry
-- it, so no `attempts` row is written). Nothing here indexes the lease or the heartbeat, so
-- a heartbeat (lease_expires_at, heartbeat_at) is a HOT update; the reaper would scan the
-- live table, which holds only queued and running jobs.
--
-- B1: one live row per unfinished job, claimed by an UPDATE (non-HOT: the claim index's
--     predicate column changes), deleted when the job ends.
-- B2: a ready row per queued job (deleted by the claim) and a lease row per running job
--     (inserted by the claim, deleted at the end): inserts and deletes only.

-- The claim index of the wide table serves no claim in this design.
DROP INDEX ix_jobs_claimable;

CREATE TABLE live_jobs (
    id               uuid PRIMARY KEY,
    seq              bigint NOT NULL,
    kind             text NOT NULL,
    kind_version     integer NOT NULL,
    state            text NOT NULL,              -- queued | running | cancel_requested
    available_at     timestamptz NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    charged_attempts integer NOT NULL DEFAULT 0,
    attempt_id       uuid,                       -- the fencing token of the running attempt
    worker_id        text,
    lease_expires_at timestamptz,
    heartbeat_at     timestamptz,
    CHECK ((state IN ('running', 'cancel_requested')) = (attempt_id IS NOT NULL)),
    CHECK ((state IN ('running', 'cancel_requested')) = (lease_expires_at IS NOT NULL))
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX live_jobs_claimable ON live_jobs (available_at, seq) WHERE state = 'queued';

CREATE TABLE ready_jobs (
    id               uuid NOT NULL,
    seq              bigint NOT NULL,
    kind             text NOT NULL,
    kind_version     integer NOT NULL,
    available_at     timestamptz NOT NULL,
    attempt          integer NOT NULL DEFAULT 0,
    charged_attempts integer NOT NULL DEFAULT 0
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
CREATE INDEX ready_jobs_order ON ready_jobs (available_at, seq);

CREATE TABLE leases (
    job_id           uuid PRIMARY KEY,
    state            text NOT NULL,              -- running | cancel_requested
    attempt          integer NOT NULL,
    charged_attempts integer NOT NULL,
    attempt_id       uuid NOT NULL,
    worker_id        text NOT NULL,
    claimed_at       timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    heartbeat_at     timestamptz NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- The change notification the wide table's update trigger sends for a claim today
-- (atlas_notify_jobs_updated: 'atlas_job_changed', ids in chunks of 100).
CREATE FUNCTION live_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_job_changed', ids)
       FROM (SELECT string_agg(id::text, ',') AS ids
               FROM (SELECT n.id, (row_number() OVER () - 1) / 100 AS chunk
                       FROM new_rows AS n) AS numbered
              GROUP BY chunk) AS chunks;
    RETURN NULL;
END
$$;
CREATE FUNCTION lease_notify_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_job_changed', ids)
       FROM (SELECT string_agg(job_id::text, ',') AS ids
               FROM (SELECT n.job_id, (row_number() OVER () - 1) / 100 AS chunk
                       FROM new_rows AS n) AS numbered
              GROUP BY chunk) AS chunks;
    RETURN NULL;
END
$$;
CREATE TRIGGER live_jobs_notify_updated AFTER UPDATE ON live_jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION live_notify_changed();
CREATE TRIGGER leases_notify_inserted AFTER INSERT ON leases
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION lease_notify_changed();

INSERT INTO live_jobs (id, seq, kind, kind_version, state, available_at)
SELECT id, seq, kind, kind_version, 'queued', available_at FROM jobs ORDER BY seq;
INSERT INTO ready_jobs (id, seq, kind, kind_version, available_at)
SELECT id, seq, kind, kind_version, available_at FROM jobs ORDER BY seq;
VACUUM ANALYZE;
