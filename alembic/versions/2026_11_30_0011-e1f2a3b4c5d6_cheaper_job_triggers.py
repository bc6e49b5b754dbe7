"""One UPDATE trigger on jobs that does only the work a statement calls for

Revision ID: e1f2a3b4c5d6
Revises: d0e1f2a3b4c5
Create Date: 2026-11-30 07:00:00.000000+00:00

Every UPDATE of ``jobs`` (a claim, a heartbeat, progress, a publication, a cancel...)
fired three statement-level triggers, each joining ``old_rows`` with ``new_rows`` and
running its statements whether or not the update concerned it:
``jobs_backlog_updated`` (owner_backlog), ``jobs_enqueue_webhook_deliveries`` (the
outbox) and ``jobs_notify_updated`` (``atlas_job_changed`` and ``atlas_work``): five
statements, four joins, for every claim and heartbeat. Now ONE trigger,
``jobs_updated``, reads the two tables once -- one join, one aggregate that answers the
changed ids, the kinds that became queued, whether any row's finished-ness or owner
changed, and whether any row reached a webhook event AND has a webhook -- and runs only
what that answer asks for:

* owner_backlog: nothing unless a row's finished-ness or owner changed (a claim, a
  heartbeat or progress writes nothing, as before, and now reads nothing more either).
  One job that finished (or came back) without changing owner: an UPDATE of its one
  counter row by key (no ON CONFLICT: the speculative insertion locks the row, a second
  WAL record, before updating it), and only if that row is missing, the upsert of one
  row with the same result as before (the proposed row carries max(delta, 0)). Several
  jobs, or an owner change: the previous upsert, unchanged (rows in (owner, slot) order);
* webhook_deliveries: nothing unless a moved job reached an event and has a webhook;
  then the same INSERT as before;
* notifications as before: ``atlas_job_changed`` with the ids whose version changed, in
  payloads of at most 100 ids; ``atlas_work`` once per kind that became queued. Sent as
  PL/pgSQL expressions (``pg_notify(...) IS NULL``, a simple expression, evaluated
  without a query), not ``PERFORM ... FROM``.

``jobs_inserted`` (revision d0e1f2a3b4c5) is left as it is: the same fast path there (one
aggregate over ``new_rows``, the counter row updated by key) measured no better than its
two statements (one-job creates 0.97-1.02x of the backend CPU, 100-job creates 1.02-1.04x).

Same effects as before, statement for statement (tests/integration/test_trigger_equivalence.py
replays one script of inserts, updates, deletes and a truncate on a database at each
revision and compares counters, outbox and notifications). Backend CPU per statement
(benchmarks/trigger_cpu.py, against the previous revision in the same minutes, PostgreSQL
18, load 3-7 on 2 cores): one-job claims, heartbeats and publications 0.94-0.97x;
100-job statements 0.96-1.04x (within the noise: the triggers are a small share of them).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "e1f2a3b4c5d6"
down_revision: str | None = "d0e1f2a3b4c5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (a migration does not import the application): app.lifecycle.TERMINAL_STATES,
# app.webhooks.WEBHOOK_EVENTS' states and revision c4d5e6f7a8b9's slot, as they are at
# this revision (tests/integration/test_owner_backlog.py pins FINISHED to the lifecycle).
FINISHED = "'canceled', 'failed', 'succeeded'"
EVENT_STATES = "'succeeded', 'failed', 'canceled', 'unresolved'"
NOTIFY_IDS_PER_PAYLOAD = 100


def slot(row: str) -> str:
    return f"(get_byte(uuid_send({row}.id), 15) & 15)::smallint"


# The several-jobs upsert: revision c4d5e6f7a8b9's, word for word.
UPDATED_UPSERT = f"""
            WITH d AS MATERIALIZED (
                SELECT c.owner, {slot("o")} AS slot, sum(c.delta) AS delta
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

# One counter row changed by ``one_delta`` (never 0 here): by key, and when the row is
# missing, the upsert's answer for it -- a row of max(delta, 0), or the conflict's sum when
# a concurrent statement inserted it meanwhile (a counter going below 0 fails the CHECK,
# as before).
ONE_COUNTER = """
            UPDATE owner_backlog SET unfinished = unfinished + one_delta
             WHERE owner = one_owner AND slot = one_slot;
            IF NOT FOUND THEN
                INSERT INTO owner_backlog AS b (owner, slot, unfinished)
                VALUES (one_owner, one_slot, GREATEST(one_delta, 0))
                ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + one_delta;
            END IF;"""

UPDATED = f"""
CREATE FUNCTION atlas_jobs_updated() RETURNS trigger
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
           min({slot("o")}),
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
        IF updated = 1 AND one_owner IS NOT NULL THEN{ONE_COUNTER}
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

TRIGGER = (
    "CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_jobs_updated()"
)

# -- what the downgrade restores: the functions as revisions f6248ed09853 (notify),
# c5d6e7f8a920 (outbox) and c4d5e6f7a8b9 (counters) wrote them ----------------------

NOTIFY_UPDATED = """
CREATE FUNCTION atlas_notify_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('atlas_job_changed', ids)
       FROM (SELECT string_agg(id::text, ',') AS ids
               FROM (SELECT n.id, (row_number() OVER () - 1) / 100 AS chunk
                       FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                      WHERE n.version <> o.version) AS numbered
              GROUP BY chunk) AS chunks;
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT n.kind
               FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
              WHERE n.state = 'queued' AND o.state <> 'queued') AS kinds;
    RETURN NULL;
END
$$
"""

ENQUEUE_DELIVERIES = """
CREATE FUNCTION atlas_enqueue_webhook_deliveries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (job_id, webhook_id, event)
    SELECT e.id, jw.webhook_id, e.event
      FROM (SELECT n.id,
                   CASE WHEN n.state <> o.state THEN 'job.' || n.state
                        ELSE 'job.result_expired' END AS event
              FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
             WHERE (n.state <> o.state
                    AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
      JOIN job_webhooks AS jw ON jw.job_id = e.id;
    RETURN NULL;
END
$$
"""

BACKLOG_UPDATED = f"""
CREATE FUNCTION atlas_backlog_jobs_updated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS MATERIALIZED (SELECT c.owner, {slot("o")} AS slot, sum(c.delta) AS delta
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
                                           AND d.slot = EXCLUDED.slot);
    RETURN NULL;
END
$$
"""

PREVIOUS_TRIGGERS = (
    "CREATE TRIGGER jobs_notify_updated AFTER UPDATE ON jobs "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_notify_jobs_updated()",
    "CREATE TRIGGER jobs_enqueue_webhook_deliveries AFTER UPDATE ON jobs "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_enqueue_webhook_deliveries()",
    "CREATE TRIGGER jobs_backlog_updated AFTER UPDATE ON jobs "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION atlas_backlog_jobs_updated()",
)
PREVIOUS_UPDATE_FUNCTIONS = (
    "atlas_notify_jobs_updated",
    "atlas_enqueue_webhook_deliveries",
    "atlas_backlog_jobs_updated",
)


def upgrade() -> None:
    # No write may slip between dropping the old triggers and creating the new one (it
    # would go uncounted); SHARE ROW EXCLUSIVE blocks writers, not readers.
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    op.execute(UPDATED)
    for name in ("jobs_notify_updated", "jobs_enqueue_webhook_deliveries", "jobs_backlog_updated"):
        op.execute(f"DROP TRIGGER {name} ON jobs")
    op.execute(TRIGGER)
    for function in PREVIOUS_UPDATE_FUNCTIONS:
        op.execute(f"DROP FUNCTION {function}()")


def downgrade() -> None:
    op.execute("LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE")
    for function in (NOTIFY_UPDATED, ENQUEUE_DELIVERIES, BACKLOG_UPDATED):
        op.execute(function)
    op.execute("DROP TRIGGER jobs_updated ON jobs")
    for trigger in PREVIOUS_TRIGGERS:
        op.execute(trigger)
    op.execute("DROP FUNCTION atlas_jobs_updated()")
