"""owner_backlog: each statement writes ONE counter row per owner, its connection's slot

Revision ID: f2a3b4c5d6e7
Revises: e1f2a3b4c5d6
Create Date: 2026-11-30 07:40:00.000000+00:00

Each owner's count of unfinished jobs is split over 16 rows (revision c4d5e6f7a8b9). A
job counted in the slot its id picked, so a statement that created or finished 64 jobs
of one owner updated up to all 16 of that owner's rows and held their locks until its
commit was flushed: concurrent publishers of one owner (one big tenant, many worker
processes) queued on the same rows. In the SQL-only drain model at 64 clients
(benchmarks/pgbench_models), turning the counting off took the server's CPU per job from
0.31 to 0.185 ms.

Now a statement adds its whole delta for an owner to ONE row: the slot of its connection,
``pg_backend_pid() & 15``. A connection's statements never wait for one another there,
and concurrent connections spread over the 16 rows. The insert trigger, the update
trigger (one owner: one row updated by key, inserted if missing; several owners or an
owner change: one upsert, rows in owner order, so no deadlock) and the delete trigger
do this; truncate empties the table as before.

A job may now be counted up on one connection's row and down on another's, so a row can
go below zero: only the SUM of an owner's rows is its count, and every reader sums
(``atlas_admission_count``; nothing else reads the table). The per-row CHECK
``ck_owner_backlog_unfinished_not_negative`` is dropped. Without it, a proposed row can
carry the delta itself, so the upserts take it from ``EXCLUDED`` (no materialized CTE,
no sub-select). The downgrade recounts the rows by id slot (with ``jobs`` locked against
writers) before it restores the CHECK and the previous functions.

Measured (benchmarks/pgbench_models/run.sh, MODELS=a, PG15, 2 cores shared, load
2.7-7.4; this revision against e1f2a3b4c5d6, alternated four times; raw lines in
benchmarks/pgbench_models/results/run7-backlog-slots.tsv). Server CPU per job: at 64
clients 0.276-0.324 ms -> 0.217-0.227 ms (0.74x), at 16 clients 0.154-0.169 ms ->
0.133-0.149 ms (0.87x); WAL per job 2,683-2,719 -> 2,645-2,690 bytes. Jobs/s at 64
clients, pair by pair: 4,487/3,807, 3,852/4,327, 4,275/5,069, 3,730/4,475 (0.85x, the
first pair at load 2.9 against 5.7, then 1.12-1.20x). Wait events of the busy backends
(round 4): ``Lock:transactionid`` (a row lock held to commit) 66 % -> 32 % of samples;
what is left is mostly connections whose pids share a slot (64 clients on 16 rows), and
the NOTIFY queue lock (``Lock:object``) is now the first wait, 11 % -> 56 %. The real
drain (benchmarks/peer-adapter --mode drain --concurrency 64 --jobs 20000, one worker
process, three alternated pairs, load 5.3-6.0) is not worse: 5,843 · 5,574 · 4,557 ->
5,711 · 4,978 · 7,212 jobs/s, server CPU for the whole call 2.53-2.84 s -> 2.16-2.55 s
(results/run7-backlog-slots-drains.txt).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "f2a3b4c5d6e7"
down_revision: str | None = "e1f2a3b4c5d6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (a migration does not import the application): app.lifecycle.TERMINAL_STATES,
# app.webhooks.WEBHOOK_EVENTS' states and revision c4d5e6f7a8b9's slot, as they are at
# this revision (tests/integration/test_owner_backlog.py pins FINISHED to the lifecycle).
FINISHED = "'canceled', 'failed', 'succeeded'"
EVENT_STATES = "'succeeded', 'failed', 'canceled', 'unresolved'"
NOTIFY_IDS_PER_PAYLOAD = 100
SLOTS = 16

# The counter row of the running connection: the same for all its statements.
CONNECTION_SLOT = f"(pg_backend_pid() & {SLOTS - 1})::smallint"


def id_slot(row: str) -> str:
    """Revision c4d5e6f7a8b9's slot of a job row: what the downgrade goes back to."""
    return f"(get_byte(uuid_send({row}.id), 15) & {SLOTS - 1})::smallint"


# ---- upgrade -------------------------------------------------------------------------

INSERTED = f"""
CREATE OR REPLACE FUNCTION atlas_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT kind FROM new_rows WHERE state = 'queued') AS kinds;
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT n.owner, {CONNECTION_SLOT}, count(*)
      FROM new_rows AS n
     WHERE n.state NOT IN ({FINISHED})
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    RETURN NULL;
END
$$
"""

# Several owners, or an owner change: the old row's contribution leaves its owner, the
# new row's joins its owner; one row per owner, in owner order.
UPDATED_UPSERT = f"""
            INSERT INTO owner_backlog AS b (owner, slot, unfinished)
            SELECT c.owner, {CONNECTION_SLOT}, sum(c.delta)
              FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
             CROSS JOIN LATERAL (VALUES
                 (o.owner, CASE WHEN o.state NOT IN ({FINISHED}) THEN -1 ELSE 0 END),
                 (n.owner, CASE WHEN n.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END)
             ) AS c (owner, delta)
             WHERE (o.state IN ({FINISHED})) <> (n.state IN ({FINISHED}))
                OR o.owner <> n.owner
             GROUP BY 1
            HAVING sum(c.delta) <> 0
             ORDER BY 1
            ON CONFLICT (owner, slot) DO UPDATE
               SET unfinished = b.unfinished + EXCLUDED.unfinished;"""

# Every row of one owner, none changing owner: the statement's delta on one row, by key;
# the upsert only when that row is missing (no ON CONFLICT on the common path: the
# speculative insertion would lock the row, a second WAL record, before updating it).
ONE_COUNTER = f"""
            UPDATE owner_backlog SET unfinished = unfinished + one_delta
             WHERE owner = one_owner AND slot = {CONNECTION_SLOT};
            IF NOT FOUND THEN
                INSERT INTO owner_backlog AS b (owner, slot, unfinished)
                VALUES (one_owner, {CONNECTION_SLOT}, one_delta)
                ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + one_delta;
            END IF;"""

UPDATED = f"""
CREATE OR REPLACE FUNCTION atlas_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed_ids text[];
    queued_kinds text[];
    queued_kind text;
    counts boolean;
    one_owner text;
    one_delta integer;
    delivers boolean;
    ignored boolean;
BEGIN
    SELECT array_agg(n.id::text) FILTER (WHERE n.version <> o.version),
           array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued' AND o.state <> 'queued'),
           bool_or((o.state IN ({FINISHED})) <> (n.state IN ({FINISHED}))
                   OR o.owner <> n.owner),
           CASE WHEN bool_and(o.owner = n.owner) AND min(o.owner) = max(o.owner)
                THEN min(o.owner) END,
           sum(CASE WHEN n.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END
               - CASE WHEN o.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END),
           bool_or(((n.state <> o.state AND n.state IN ({EVENT_STATES}))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired'))
                   AND EXISTS (SELECT 1 FROM job_webhooks AS jw WHERE jw.job_id = n.id))
      INTO changed_ids, queued_kinds, counts, one_owner, one_delta, delivers
      FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id;
    -- one_owner is NULL when the rows have several owners or one changed owner.
    IF counts THEN
        IF one_owner IS NOT NULL THEN
            IF one_delta <> 0 THEN{ONE_COUNTER}
            END IF;
        ELSE{UPDATED_UPSERT}
        END IF;
    END IF;
    IF delivers THEN
        INSERT INTO webhook_deliveries (job_id, webhook_id, event)
        SELECT e.id, jw.webhook_id, e.event
          FROM (SELECT n.id,
                       CASE WHEN n.state <> o.state THEN 'job.' || n.state
                            ELSE 'job.result_expired' END AS event
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE (n.state <> o.state AND n.state IN ({EVENT_STATES}))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
          JOIN job_webhooks AS jw ON jw.job_id = e.id;
    END IF;
    FOR chunk_start IN 1 .. coalesce(cardinality(changed_ids), 0)
                       BY {NOTIFY_IDS_PER_PAYLOAD} LOOP
        ignored := pg_notify('atlas_job_changed',
                             array_to_string(changed_ids[chunk_start:chunk_start
                                                         + {NOTIFY_IDS_PER_PAYLOAD - 1}],
                                             ',')) IS NULL;
    END LOOP;
    FOREACH queued_kind IN ARRAY coalesce(queued_kinds, '{{}}') LOOP
        ignored := pg_notify('atlas_work', queued_kind) IS NULL;
    END LOOP;
    RETURN NULL;
END
$$
"""

DELETED = f"""
CREATE OR REPLACE FUNCTION atlas_backlog_jobs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT o.owner, {CONNECTION_SLOT}, -count(*)
      FROM old_rows AS o
     WHERE o.state NOT IN ({FINISHED})
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    RETURN NULL;
END
$$
"""

# ---- downgrade: the functions as revisions d0e1f2a3b4c5 (insert), e1f2a3b4c5d6 (update)
# and c4d5e6f7a8b9 (delete) wrote them, word for word -----------------------------------

PREVIOUS_INSERTED = f"""
CREATE OR REPLACE FUNCTION atlas_jobs_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT kind FROM new_rows WHERE state = 'queued') AS kinds;
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT n.owner, {id_slot("n")}, count(*)
      FROM new_rows AS n
     WHERE n.state NOT IN ({FINISHED})
     GROUP BY 1, 2
     ORDER BY 1, 2
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    RETURN NULL;
END
$$
"""

PREVIOUS_UPDATED_UPSERT = f"""
            WITH d AS MATERIALIZED (
                SELECT c.owner, {id_slot("o")} AS slot, sum(c.delta) AS delta
                  FROM old_rows AS o JOIN new_rows AS n ON n.id = o.id
                 CROSS JOIN LATERAL (VALUES
                     (o.owner, CASE WHEN o.state NOT IN ({FINISHED}) THEN -1 ELSE 0 END),
                     (n.owner, CASE WHEN n.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END)
                 ) AS c (owner, delta)
                 WHERE (o.state IN ({FINISHED})) <> (n.state IN ({FINISHED}))
                    OR o.owner <> n.owner
                 GROUP BY 1, 2)
            INSERT INTO owner_backlog AS b (owner, slot, unfinished)
            SELECT owner, slot, GREATEST(delta, 0) FROM d
             WHERE delta <> 0
             ORDER BY owner, slot
            ON CONFLICT (owner, slot) DO UPDATE
               SET unfinished = b.unfinished + (SELECT d.delta FROM d
                                                 WHERE d.owner = EXCLUDED.owner
                                                   AND d.slot = EXCLUDED.slot);"""

PREVIOUS_ONE_COUNTER = """
            UPDATE owner_backlog SET unfinished = unfinished + one_delta
             WHERE owner = one_owner AND slot = one_slot;
            IF NOT FOUND THEN
                INSERT INTO owner_backlog AS b (owner, slot, unfinished)
                VALUES (one_owner, one_slot, GREATEST(one_delta, 0))
                ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + one_delta;
            END IF;"""

PREVIOUS_UPDATED = f"""
CREATE OR REPLACE FUNCTION atlas_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    updated bigint;
    changed_ids text[];
    queued_kinds text[];
    queued_kind text;
    counts boolean;
    one_owner text;
    one_slot smallint;
    one_delta integer;
    delivers boolean;
    ignored boolean;
BEGIN
    SELECT count(*),
           array_agg(n.id::text) FILTER (WHERE n.version <> o.version),
           array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued' AND o.state <> 'queued'),
           bool_or((o.state IN ({FINISHED})) <> (n.state IN ({FINISHED}))
                   OR o.owner <> n.owner),
           CASE WHEN bool_and(o.owner = n.owner) THEN min(o.owner) END,
           min({id_slot("o")}),
           sum(CASE WHEN n.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END
               - CASE WHEN o.state NOT IN ({FINISHED}) THEN 1 ELSE 0 END),
           bool_or(((n.state <> o.state AND n.state IN ({EVENT_STATES}))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired'))
                   AND EXISTS (SELECT 1 FROM job_webhooks AS jw WHERE jw.job_id = n.id))
      INTO updated, changed_ids, queued_kinds, counts, one_owner, one_slot, one_delta,
           delivers
      FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id;
    -- one_owner is NULL when an owner changed: that takes the general upsert.
    IF counts THEN
        IF updated = 1 AND one_owner IS NOT NULL THEN{PREVIOUS_ONE_COUNTER}
        ELSE{PREVIOUS_UPDATED_UPSERT}
        END IF;
    END IF;
    IF delivers THEN
        INSERT INTO webhook_deliveries (job_id, webhook_id, event)
        SELECT e.id, jw.webhook_id, e.event
          FROM (SELECT n.id,
                       CASE WHEN n.state <> o.state THEN 'job.' || n.state
                            ELSE 'job.result_expired' END AS event
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE (n.state <> o.state AND n.state IN ({EVENT_STATES}))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
          JOIN job_webhooks AS jw ON jw.job_id = e.id;
    END IF;
    FOR chunk_start IN 1 .. coalesce(cardinality(changed_ids), 0)
                       BY {NOTIFY_IDS_PER_PAYLOAD} LOOP
        ignored := pg_notify('atlas_job_changed',
                             array_to_string(changed_ids[chunk_start:chunk_start
                                                         + {NOTIFY_IDS_PER_PAYLOAD - 1}],
                                             ',')) IS NULL;
    END LOOP;
    FOREACH queued_kind IN ARRAY coalesce(queued_kinds, '{{}}') LOOP
        ignored := pg_notify('atlas_work', queued_kind) IS NULL;
    END LOOP;
    RETURN NULL;
END
$$
"""

PREVIOUS_DELETED = f"""
CREATE OR REPLACE FUNCTION atlas_backlog_jobs_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS MATERIALIZED (SELECT o.owner, {id_slot("o")} AS slot, -count(*) AS delta
                              FROM old_rows AS o
                             WHERE o.state NOT IN ({FINISHED})
                             GROUP BY 1, 2)
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT owner, slot, GREATEST(delta, 0) FROM d
     WHERE delta <> 0
     ORDER BY owner, slot
    ON CONFLICT (owner, slot) DO UPDATE
       SET unfinished = b.unfinished + (SELECT d.delta FROM d
                                         WHERE d.owner = EXCLUDED.owner
                                           AND d.slot = EXCLUDED.slot);
    RETURN NULL;
END
$$
"""

RECOUNT_BY_ID_SLOT = f"""
INSERT INTO owner_backlog (owner, slot, unfinished)
SELECT j.owner, {id_slot("j")}, count(*) FROM jobs AS j
 WHERE j.state NOT IN ({FINISHED})
 GROUP BY 1, 2 ORDER BY 1, 2
"""

CHECK = "ck_owner_backlog_unfinished_not_negative"


def upgrade() -> None:
    # Old and new functions both keep each owner's SUM exact, whichever a concurrent
    # statement runs, so writers need not be stopped; dropping the CHECK first lets a row
    # go below zero from this transaction's commit on.
    op.execute(f"ALTER TABLE owner_backlog DROP CONSTRAINT {CHECK}")
    for function in (INSERTED, UPDATED, DELETED):
        op.execute(function)


def downgrade() -> None:
    # The rows go back to one per (owner, id slot), each >= 0: recounted from the jobs,
    # with writers blocked (SHARE ROW EXCLUSIVE, readers go on) until the commit.
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    for function in (PREVIOUS_INSERTED, PREVIOUS_UPDATED, PREVIOUS_DELETED):
        op.execute(function)
    op.execute("DELETE FROM owner_backlog")
    op.execute(RECOUNT_BY_ID_SLOT)
    op.execute(f"ALTER TABLE owner_backlog ADD CONSTRAINT {CHECK} CHECK (unfinished >= 0)")
