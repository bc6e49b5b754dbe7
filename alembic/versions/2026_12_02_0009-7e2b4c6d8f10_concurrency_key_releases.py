"""concurrency keys: ends are released on slots, so a completion never locks the key's row

Revision ID: 7e2b4c6d8f10
Revises: 6e2b4c8d0f13
Create Date: 2026-12-02 18:20:00.000000+00:00

Until now every job of a concurrency key that entered or left running updated the key's
row of ``concurrency_keys`` (``running``) in the jobs update trigger, and held its row
lock until the transaction committed. The claim takes the rows of its lanes' keys
``FOR NO KEY UPDATE SKIP LOCKED`` (so two claims never spend the same room): while a
completer's group commit held the key's row, every claim skipped the key, found no work,
and the pool waited out its poll interval. A drain of jobs that all carry one key (limit
1,000, never binding) ran at 0.02-0.08x the plain drain.

Now only a job ENTERING running (a claim, under the key's row lock the claim already
holds) writes the key's row. A job LEAVING running (an end, an expired lease, a deletion)
adds one to ``concurrency_key_releases`` -- per key, 16 slots, the slot of the writing
connection (``pg_backend_pid() & 15``, as ``owner_backlog``), a count that only grows --
and never touches the key's row. The number of jobs of a key running is

    running - GREATEST(sum(releases of the key) - folded, 0)

where ``folded`` (new column of ``concurrency_keys``) is the releases sum already
subtracted from ``running``: each claim's trigger, under the key's lock, folds in the
releases committed by then (``running`` stays near the true count, ``folded`` is the sum
it saw). A claim reads the key's row at its latest committed version (it holds the lock)
and the releases with its statement's snapshot, which may miss releases committed since:
the count it computes is then too high, never too low, so it may leave room unspent for
a moment but never spends room twice, and ``running`` never exceeds the limit.

The truncate trigger empties the releases as well. The downgrade folds every release into
``running`` (with ``jobs`` locked against writers) before it drops the table and the
column and restores the previous functions.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7e2b4c6d8f10"
down_revision: str | None = "6e2b4c8d0f13"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RELEASES_STORAGE = {
    "fillfactor": "50",
    "autovacuum_vacuum_scale_factor": "0.05",
    "autovacuum_vacuum_cost_delay": "0",
}

NEW_ATLAS_BACKLOG_JOBS_DELETED = r"""
CREATE OR REPLACE FUNCTION public.atlas_backlog_jobs_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT o.owner, (pg_backend_pid() & 15)::smallint, -count(*)
      FROM old_rows AS o
     WHERE o.state NOT IN ('canceled', 'failed', 'succeeded')
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    INSERT INTO concurrency_key_releases AS r (key, slot, released)
    SELECT o.concurrency_key, (pg_backend_pid() & 15)::smallint, count(*)
      FROM old_rows AS o
     WHERE o.concurrency_key <> '' AND o.state IN ('running', 'cancel_requested')
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (key, slot) DO UPDATE SET released = r.released + EXCLUDED.released;
    RETURN NULL;
END
$function$;
"""

NEW_ATLAS_BACKLOG_JOBS_TRUNCATED = r"""
CREATE OR REPLACE FUNCTION public.atlas_backlog_jobs_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM owner_backlog;
    DELETE FROM claim_lanes;
    DELETE FROM concurrency_key_releases;
    UPDATE concurrency_keys SET running = 0, folded = 0 WHERE running <> 0 OR folded <> 0;
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

OLD_ATLAS_BACKLOG_JOBS_DELETED = r"""
CREATE OR REPLACE FUNCTION public.atlas_backlog_jobs_deleted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO owner_backlog AS b (owner, slot, unfinished)
    SELECT o.owner, (pg_backend_pid() & 15)::smallint, -count(*)
      FROM old_rows AS o
     WHERE o.state NOT IN ('canceled', 'failed', 'succeeded')
     GROUP BY 1
     ORDER BY 1
    ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
    UPDATE concurrency_keys AS k
       SET running = k.running - d.gone
      FROM (SELECT o.concurrency_key AS key, count(*) AS gone
              FROM old_rows AS o
             WHERE o.concurrency_key <> '' AND o.state IN ('running', 'cancel_requested')
             GROUP BY 1) AS d
     WHERE k.key = d.key;
    RETURN NULL;
END
$function$;
"""

OLD_ATLAS_BACKLOG_JOBS_TRUNCATED = r"""
CREATE OR REPLACE FUNCTION public.atlas_backlog_jobs_truncated()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    DELETE FROM owner_backlog;
    DELETE FROM claim_lanes;
    UPDATE concurrency_keys SET running = 0 WHERE running <> 0;
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
    keyed boolean;
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
           bool_or(n.concurrency_key <> ''
                   AND (n.state IN ('running', 'cancel_requested')) <> (o.state IN ('running', 'cancel_requested')))
      INTO changed_ids, queued_kinds, counts, one_owner, one_delta, delivers, keyed
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
    IF keyed THEN
        PERFORM 1
           FROM concurrency_keys AS k
          WHERE k.key IN (SELECT n.concurrency_key FROM new_rows AS n WHERE n.concurrency_key <> '')
          ORDER BY k.key
            FOR NO KEY UPDATE;
        UPDATE concurrency_keys AS k
           SET running = k.running + d.delta,
               tokens = CASE WHEN k.rate IS NULL THEN NULL
                             ELSE LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                                        * extract(epoch FROM now() - COALESCE(k.refilled_at, now()))
                                        / k.period_seconds) - d.starts END,
               refilled_at = CASE WHEN k.rate IS NULL THEN NULL ELSE now() END
          FROM (SELECT n.concurrency_key AS key,
                       sum(CASE WHEN n.state IN ('running', 'cancel_requested') THEN 1 ELSE 0 END
                           - CASE WHEN o.state IN ('running', 'cancel_requested') THEN 1 ELSE 0 END) AS delta,
                       count(*) FILTER (WHERE n.state = 'running' AND o.state = 'queued') AS starts
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.concurrency_key <> ''
                 GROUP BY 1) AS d
         WHERE k.key = d.key AND (d.delta <> 0 OR d.starts <> 0);
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
    op.add_column(
        "concurrency_keys",
        sa.Column("folded", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.create_table(
        "concurrency_key_releases",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("released", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "slot >= 0 AND slot < 16", name=op.f("ck_concurrency_key_releases_slot_in_range")
        ),
        sa.PrimaryKeyConstraint("key", "slot", name=op.f("pk_concurrency_key_releases")),
        postgresql_with=RELEASES_STORAGE,
    )
    for text in (
        NEW_ATLAS_BACKLOG_JOBS_DELETED,
        NEW_ATLAS_BACKLOG_JOBS_TRUNCATED,
        NEW_ATLAS_JOBS_UPDATED,
    ):
        op.execute(text)


def downgrade() -> None:
    for text in (
        OLD_ATLAS_BACKLOG_JOBS_DELETED,
        OLD_ATLAS_BACKLOG_JOBS_TRUNCATED,
        OLD_ATLAS_JOBS_UPDATED,
    ):
        op.execute(text)
    # Every release folded into running, no writer moving a job meanwhile.
    op.execute("LOCK TABLE jobs IN SHARE MODE")
    op.execute("""
UPDATE concurrency_keys AS k
   SET running = k.running - GREATEST(r.released - k.folded, 0)
  FROM (SELECT key, sum(released) AS released FROM concurrency_key_releases GROUP BY 1) AS r
 WHERE r.key = k.key
""")
    op.drop_table("concurrency_key_releases")
    op.drop_column("concurrency_keys", "folded")
