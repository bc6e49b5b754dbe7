"""jobs triggers: one pass over a creation's rows; one key's claim and ends written directly

Revision ID: 4b7d9e1f3a25
Revises: 9c3d5e7f1a24
Create Date: 2026-12-03 21:30:00.000000+00:00

``atlas_jobs_inserted`` read the new rows five times (the kinds to wake, the owners'
backlog, the owners' lane locks, the lanes, the keys). It now groups them by lane in ONE
pass into arrays (a batch has one lane or a few) and every write reads those.

It also gives a key an operator set before any job named it the declared limit and start
rate of the first jobs that name it: until now such a key kept no declaration (the
insert does nothing on an existing key), so clearing the operator's values later left
it unlimited. The operator's values stay in force; only a key with neither declaration
matches, so no other key's row is locked. Keys set that way before this revision are
filled by the next jobs that name them.

``atlas_jobs_updated``: when every keyed job of the statement has ONE key (a claim of one
key's lanes, a completer's group), the key's running count (a claim) and its release slot
(ends) are written directly from the first pass's counts instead of by two more joins of
the transition tables. Several keys take the path they took before, in key order.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "4b7d9e1f3a25"
down_revision: str | None = "9c3d5e7f1a24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_ATLAS_JOBS_INSERTED = r"""
CREATE OR REPLACE FUNCTION public.atlas_jobs_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    queued_kinds text[];
    queued_owners text[];
    keyed boolean;
    item text;
    ignored boolean;
BEGIN
    SELECT array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued'),
           array_agg(DISTINCT n.owner ORDER BY n.owner) FILTER (WHERE n.state = 'queued'),
           bool_or(n.concurrency_key <> '')
      INTO queued_kinds, queued_owners, keyed
      FROM new_rows AS n;
    FOREACH item IN ARRAY coalesce(queued_kinds, '{}') LOOP
        ignored := pg_notify('atlas_work', item) IS NULL;
    END LOOP;
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT n.owner, (pg_backend_pid() & 15)::smallint, count(*)
      FROM new_rows AS n
     WHERE n.state NOT IN ('canceled', 'failed', 'succeeded')
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    IF queued_owners IS NOT NULL THEN
        FOREACH item IN ARRAY queued_owners LOOP
            ignored := pg_advisory_xact_lock_shared(hashtextextended('atlas.lanes:' || item, 0)) IS NULL;
        END LOOP;
        INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
        SELECT DISTINCT n.owner, n.kind, n.kind_version, n.concurrency_key,
               COALESCE((SELECT min(l.served) FROM claim_lanes AS l) - 1, 0)
          FROM new_rows AS n
         WHERE n.state = 'queued'
        ON CONFLICT DO NOTHING;
    END IF;
    IF keyed THEN
        WITH named AS MATERIALIZED (
            SELECT DISTINCT ON (n.concurrency_key) n.concurrency_key, n.concurrency_limit,
                   n.concurrency_rate, n.concurrency_period_seconds
              FROM new_rows AS n
             WHERE n.concurrency_key <> ''
             ORDER BY n.concurrency_key
        ), added AS (
            INSERT INTO concurrency_keys (key, declared_limit, declared_rate,
                                          declared_period_seconds, rate, period_seconds)
            SELECT d.concurrency_key, d.concurrency_limit, d.concurrency_rate,
                   d.concurrency_period_seconds, d.concurrency_rate, d.concurrency_period_seconds
              FROM named AS d
            ON CONFLICT DO NOTHING
        )
        UPDATE concurrency_keys AS k
           SET declared_limit = d.concurrency_limit,
               declared_rate = d.concurrency_rate,
               declared_period_seconds = d.concurrency_period_seconds,
               rate = COALESCE(k.rate, d.concurrency_rate),
               period_seconds = CASE WHEN k.rate IS NULL THEN d.concurrency_period_seconds
                                     ELSE k.period_seconds END
          FROM named AS d
         WHERE k.key = d.concurrency_key
           AND k.declared_limit IS NULL AND k.declared_rate IS NULL
           AND (d.concurrency_limit IS NOT NULL OR d.concurrency_rate IS NOT NULL);
    END IF;
    RETURN NULL;
END
$function$;
"""

NEW_ATLAS_JOBS_UPDATED = r"""
CREATE OR REPLACE FUNCTION public.atlas_jobs_updated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    changed_ids text[];
    queued_kinds text[];
    queued_kind text;
    counts boolean;
    one_owner text;
    one_delta integer;
    delivers boolean;
    keyed_up boolean;
    keyed_down boolean;
    up_key text;
    ups integer;
    up_starts integer;
    down_key text;
    downs integer;
    ignored boolean;
BEGIN
    SELECT array_agg(n.id::text) FILTER (WHERE n.version <> o.version),
           array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued' AND o.state <> 'queued'),
           bool_or((o.state IN ('canceled', 'failed', 'succeeded')) <> (n.state IN ('canceled', 'failed', 'succeeded'))
                   OR o.owner <> n.owner),
           CASE WHEN bool_and(o.owner = n.owner) AND min(o.owner) = max(o.owner)
                THEN min(o.owner) END,
           sum(CASE WHEN n.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END
               - CASE WHEN o.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END),
           bool_or(((n.state <> o.state AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired'))
                   AND EXISTS (SELECT 1 FROM job_webhooks AS jw WHERE jw.job_id = n.id)),
           bool_or(n.concurrency_key <> '' AND n.state IN ('running', 'cancel_requested')
                   AND o.state NOT IN ('running', 'cancel_requested')),
           bool_or(n.concurrency_key <> '' AND o.state IN ('running', 'cancel_requested')
                   AND n.state NOT IN ('running', 'cancel_requested')),
           CASE WHEN min(n.concurrency_key) FILTER (WHERE u.up) = max(n.concurrency_key) FILTER (WHERE u.up)
                THEN min(n.concurrency_key) FILTER (WHERE u.up) END,
           count(*) FILTER (WHERE u.up),
           count(*) FILTER (WHERE u.up AND n.state = 'running' AND o.state = 'queued'),
           CASE WHEN min(n.concurrency_key) FILTER (WHERE u.down) = max(n.concurrency_key) FILTER (WHERE u.down)
                THEN min(n.concurrency_key) FILTER (WHERE u.down) END,
           count(*) FILTER (WHERE u.down)
      INTO changed_ids, queued_kinds, counts, one_owner, one_delta, delivers, keyed_up, keyed_down,
           up_key, ups, up_starts, down_key, downs
      FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id
     CROSS JOIN LATERAL (
         SELECT n.concurrency_key <> '' AND n.state IN ('running', 'cancel_requested')
                AND o.state NOT IN ('running', 'cancel_requested') AS up,
                n.concurrency_key <> '' AND o.state IN ('running', 'cancel_requested')
                AND n.state NOT IN ('running', 'cancel_requested') AS down
     ) AS u;
    -- one_owner is NULL when the rows have several owners or one changed owner.
    IF counts THEN
        IF one_owner IS NOT NULL THEN
            IF one_delta <> 0 THEN
                UPDATE owner_backlog SET unfinished = unfinished + one_delta
                 WHERE owner = one_owner AND slot = (pg_backend_pid() & 15)::smallint;
                IF NOT FOUND THEN
                    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
                    VALUES (one_owner, (pg_backend_pid() & 15)::smallint, one_delta)
                    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + one_delta;
                END IF;
            END IF;
        ELSE
            INSERT INTO owner_backlog AS b (owner, slot, unfinished)
            SELECT c.owner, (pg_backend_pid() & 15)::smallint, sum(c.delta)
              FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id
             CROSS JOIN LATERAL (VALUES
                 (o.owner, CASE WHEN o.state NOT IN ('canceled', 'failed', 'succeeded') THEN -1 ELSE 0 END),
                 (n.owner, CASE WHEN n.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END)
             ) AS c (owner, delta)
             WHERE (o.state IN ('canceled', 'failed', 'succeeded')) <> (n.state IN ('canceled', 'failed', 'succeeded'))
                OR o.owner <> n.owner
             GROUP BY 1
            HAVING sum(c.delta) <> 0
             ORDER BY 1
            ON CONFLICT (owner, slot) DO UPDATE
               SET unfinished = b.unfinished + EXCLUDED.unfinished;
        END IF;
    END IF;
    IF keyed_up AND up_key IS NOT NULL THEN
        UPDATE concurrency_keys AS k
           SET running = k.running + ups - GREATEST(COALESCE(r.released, 0) - k.folded, 0),
               folded = GREATEST(COALESCE(r.released, 0), k.folded),
               tokens = CASE WHEN k.rate IS NULL THEN NULL
                             ELSE LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                                        * extract(epoch FROM now() - COALESCE(k.refilled_at, now()))
                                        / k.period_seconds) - up_starts END,
               refilled_at = CASE WHEN k.rate IS NULL THEN NULL ELSE now() END
          FROM (SELECT sum(c.released) AS released
                  FROM concurrency_key_releases AS c
                 WHERE c.key = up_key) AS r
         WHERE k.key = up_key;
    ELSIF keyed_up THEN
        PERFORM 1
           FROM concurrency_keys AS k
          WHERE k.key IN (SELECT n.concurrency_key
                            FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                           WHERE n.concurrency_key <> ''
                             AND n.state IN ('running', 'cancel_requested')
                             AND o.state NOT IN ('running', 'cancel_requested'))
          ORDER BY k.key
            FOR NO KEY UPDATE;
        UPDATE concurrency_keys AS k
           SET running = k.running + d.ups - GREATEST(COALESCE(r.released, 0) - k.folded, 0),
               folded = GREATEST(COALESCE(r.released, 0), k.folded),
               tokens = CASE WHEN k.rate IS NULL THEN NULL
                             ELSE LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                                        * extract(epoch FROM now() - COALESCE(k.refilled_at, now()))
                                        / k.period_seconds) - d.starts END,
               refilled_at = CASE WHEN k.rate IS NULL THEN NULL ELSE now() END
          FROM (SELECT n.concurrency_key AS key,
                       count(*) FILTER (WHERE n.state IN ('running', 'cancel_requested')
                                          AND o.state NOT IN ('running', 'cancel_requested')) AS ups,
                       count(*) FILTER (WHERE n.state = 'running' AND o.state = 'queued') AS starts
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.concurrency_key <> ''
                 GROUP BY 1) AS d
          LEFT JOIN LATERAL (SELECT sum(c.released) AS released
                               FROM concurrency_key_releases AS c
                              WHERE c.key = d.key) AS r ON true
         WHERE k.key = d.key AND d.ups > 0;
    END IF;
    IF keyed_down AND down_key IS NOT NULL THEN
        INSERT INTO concurrency_key_releases AS r (key, slot, released)
        VALUES (down_key, (pg_backend_pid() & 15)::smallint, downs)
        ON CONFLICT (key, slot) DO UPDATE SET released = r.released + EXCLUDED.released;
    ELSIF keyed_down THEN
        INSERT INTO concurrency_key_releases AS r (key, slot, released)
        SELECT n.concurrency_key, (pg_backend_pid() & 15)::smallint, count(*)
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.concurrency_key <> ''
           AND o.state IN ('running', 'cancel_requested')
           AND n.state NOT IN ('running', 'cancel_requested')
         GROUP BY 1
         ORDER BY 1
        ON CONFLICT (key, slot) DO UPDATE SET released = r.released + EXCLUDED.released;
    END IF;
    IF queued_kinds IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('atlas.lanes:' || q.owner, 0))
           FROM (SELECT DISTINCT n.owner
                   FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                  WHERE n.state = 'queued' AND o.state <> 'queued'
                  ORDER BY 1) AS q;
        INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
        SELECT DISTINCT n.owner, n.kind, n.kind_version, n.concurrency_key,
               COALESCE((SELECT min(l.served) FROM claim_lanes AS l) - 1, 0)
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.state = 'queued' AND o.state <> 'queued'
        ON CONFLICT DO NOTHING;
    END IF;
    IF delivers THEN
        INSERT INTO webhook_deliveries (job_id, webhook_id, event)
        SELECT e.id, jw.webhook_id, e.event
          FROM (SELECT n.id,
                       CASE WHEN n.state <> o.state THEN 'job.' || n.state
                            ELSE 'job.result_expired' END AS event
                  FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id
                 WHERE (n.state <> o.state AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
          JOIN job_webhooks AS jw ON jw.job_id = e.id;
    END IF;
    FOR chunk_start IN 1 .. coalesce(cardinality(changed_ids), 0) BY 100 LOOP
        ignored := pg_notify('atlas_job_changed',
                             array_to_string(changed_ids[chunk_start:chunk_start + 99],
                                             ',')) IS NULL;
    END LOOP;
    FOREACH queued_kind IN ARRAY coalesce(queued_kinds, '{}') LOOP
        ignored := pg_notify('atlas_work', queued_kind) IS NULL;
    END LOOP;
    RETURN NULL;
END
$function$;
"""

OLD_ATLAS_JOBS_INSERTED = r"""
CREATE OR REPLACE FUNCTION public.atlas_jobs_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('atlas_work', kind)
       FROM (SELECT DISTINCT kind FROM new_rows WHERE state = 'queued') AS kinds;
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT n.owner, (pg_backend_pid() & 15)::smallint, count(*)
      FROM new_rows AS n
     WHERE n.state NOT IN ('canceled', 'failed', 'succeeded')
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('atlas.lanes:' || o.owner, 0))
       FROM (SELECT DISTINCT owner FROM new_rows WHERE state = 'queued' ORDER BY 1) AS o;
    INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
    SELECT DISTINCT n.owner, n.kind, n.kind_version, n.concurrency_key,
           COALESCE((SELECT min(l.served) FROM claim_lanes AS l) - 1, 0)
      FROM new_rows AS n
     WHERE n.state = 'queued'
    ON CONFLICT DO NOTHING;
    INSERT INTO concurrency_keys (key, declared_limit, declared_rate, declared_period_seconds,
                                  rate, period_seconds)
    SELECT DISTINCT ON (n.concurrency_key) n.concurrency_key, n.concurrency_limit,
           n.concurrency_rate, n.concurrency_period_seconds,
           n.concurrency_rate, n.concurrency_period_seconds
      FROM new_rows AS n
     WHERE n.concurrency_key <> ''
     ORDER BY n.concurrency_key
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$function$;
"""

OLD_ATLAS_JOBS_UPDATED = r"""
CREATE OR REPLACE FUNCTION public.atlas_jobs_updated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    changed_ids text[];
    queued_kinds text[];
    queued_kind text;
    counts boolean;
    one_owner text;
    one_delta integer;
    delivers boolean;
    keyed_up boolean;
    keyed_down boolean;
    ignored boolean;
BEGIN
    SELECT array_agg(n.id::text) FILTER (WHERE n.version <> o.version),
           array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued' AND o.state <> 'queued'),
           bool_or((o.state IN ('canceled', 'failed', 'succeeded')) <> (n.state IN ('canceled', 'failed', 'succeeded'))
                   OR o.owner <> n.owner),
           CASE WHEN bool_and(o.owner = n.owner) AND min(o.owner) = max(o.owner)
                THEN min(o.owner) END,
           sum(CASE WHEN n.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END
               - CASE WHEN o.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END),
           bool_or(((n.state <> o.state AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired'))
                   AND EXISTS (SELECT 1 FROM job_webhooks AS jw WHERE jw.job_id = n.id)),
           bool_or(n.concurrency_key <> '' AND n.state IN ('running', 'cancel_requested')
                   AND o.state NOT IN ('running', 'cancel_requested')),
           bool_or(n.concurrency_key <> '' AND o.state IN ('running', 'cancel_requested')
                   AND n.state NOT IN ('running', 'cancel_requested'))
      INTO changed_ids, queued_kinds, counts, one_owner, one_delta, delivers, keyed_up, keyed_down
      FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id;
    -- one_owner is NULL when the rows have several owners or one changed owner.
    IF counts THEN
        IF one_owner IS NOT NULL THEN
            IF one_delta <> 0 THEN
                UPDATE owner_backlog SET unfinished = unfinished + one_delta
                 WHERE owner = one_owner AND slot = (pg_backend_pid() & 15)::smallint;
                IF NOT FOUND THEN
                    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
                    VALUES (one_owner, (pg_backend_pid() & 15)::smallint, one_delta)
                    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + one_delta;
                END IF;
            END IF;
        ELSE
            INSERT INTO owner_backlog AS b (owner, slot, unfinished)
            SELECT c.owner, (pg_backend_pid() & 15)::smallint, sum(c.delta)
              FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id
             CROSS JOIN LATERAL (VALUES
                 (o.owner, CASE WHEN o.state NOT IN ('canceled', 'failed', 'succeeded') THEN -1 ELSE 0 END),
                 (n.owner, CASE WHEN n.state NOT IN ('canceled', 'failed', 'succeeded') THEN 1 ELSE 0 END)
             ) AS c (owner, delta)
             WHERE (o.state IN ('canceled', 'failed', 'succeeded')) <> (n.state IN ('canceled', 'failed', 'succeeded'))
                OR o.owner <> n.owner
             GROUP BY 1
            HAVING sum(c.delta) <> 0
             ORDER BY 1
            ON CONFLICT (owner, slot) DO UPDATE
               SET unfinished = b.unfinished + EXCLUDED.unfinished;
        END IF;
    END IF;
    IF keyed_up THEN
        PERFORM 1
           FROM concurrency_keys AS k
          WHERE k.key IN (SELECT n.concurrency_key
                            FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                           WHERE n.concurrency_key <> ''
                             AND n.state IN ('running', 'cancel_requested')
                             AND o.state NOT IN ('running', 'cancel_requested'))
          ORDER BY k.key
            FOR NO KEY UPDATE;
        UPDATE concurrency_keys AS k
           SET running = k.running + d.ups - GREATEST(COALESCE(r.released, 0) - k.folded, 0),
               folded = GREATEST(COALESCE(r.released, 0), k.folded),
               tokens = CASE WHEN k.rate IS NULL THEN NULL
                             ELSE LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                                        * extract(epoch FROM now() - COALESCE(k.refilled_at, now()))
                                        / k.period_seconds) - d.starts END,
               refilled_at = CASE WHEN k.rate IS NULL THEN NULL ELSE now() END
          FROM (SELECT n.concurrency_key AS key,
                       count(*) FILTER (WHERE n.state IN ('running', 'cancel_requested')
                                          AND o.state NOT IN ('running', 'cancel_requested')) AS ups,
                       count(*) FILTER (WHERE n.state = 'running' AND o.state = 'queued') AS starts
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.concurrency_key <> ''
                 GROUP BY 1) AS d
          LEFT JOIN LATERAL (SELECT sum(c.released) AS released
                               FROM concurrency_key_releases AS c
                              WHERE c.key = d.key) AS r ON true
         WHERE k.key = d.key AND d.ups > 0;
    END IF;
    IF keyed_down THEN
        INSERT INTO concurrency_key_releases AS r (key, slot, released)
        SELECT n.concurrency_key, (pg_backend_pid() & 15)::smallint, count(*)
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.concurrency_key <> ''
           AND o.state IN ('running', 'cancel_requested')
           AND n.state NOT IN ('running', 'cancel_requested')
         GROUP BY 1
         ORDER BY 1
        ON CONFLICT (key, slot) DO UPDATE SET released = r.released + EXCLUDED.released;
    END IF;
    IF queued_kinds IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(hashtextextended('atlas.lanes:' || q.owner, 0))
           FROM (SELECT DISTINCT n.owner
                   FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                  WHERE n.state = 'queued' AND o.state <> 'queued'
                  ORDER BY 1) AS q;
        INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
        SELECT DISTINCT n.owner, n.kind, n.kind_version, n.concurrency_key,
               COALESCE((SELECT min(l.served) FROM claim_lanes AS l) - 1, 0)
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.state = 'queued' AND o.state <> 'queued'
        ON CONFLICT DO NOTHING;
    END IF;
    IF delivers THEN
        INSERT INTO webhook_deliveries (job_id, webhook_id, event)
        SELECT e.id, jw.webhook_id, e.event
          FROM (SELECT n.id,
                       CASE WHEN n.state <> o.state THEN 'job.' || n.state
                            ELSE 'job.result_expired' END AS event
                  FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id
                 WHERE (n.state <> o.state AND n.state IN ('succeeded', 'failed', 'canceled', 'unresolved'))
                    OR (n.delivery_state = 'expired' AND o.delivery_state <> 'expired')) AS e
          JOIN job_webhooks AS jw ON jw.job_id = e.id;
    END IF;
    FOR chunk_start IN 1 .. coalesce(cardinality(changed_ids), 0) BY 100 LOOP
        ignored := pg_notify('atlas_job_changed',
                             array_to_string(changed_ids[chunk_start:chunk_start + 99],
                                             ',')) IS NULL;
    END LOOP;
    FOREACH queued_kind IN ARRAY coalesce(queued_kinds, '{}') LOOP
        ignored := pg_notify('atlas_work', queued_kind) IS NULL;
    END LOOP;
    RETURN NULL;
END
$function$;
"""


def upgrade() -> None:
    for text in (NEW_ATLAS_JOBS_INSERTED, NEW_ATLAS_JOBS_UPDATED):
        op.execute(text)


def downgrade() -> None:
    for text in (OLD_ATLAS_JOBS_INSERTED, OLD_ATLAS_JOBS_UPDATED):
        op.execute(text)
