"""jobs_inserted: a creation of one lane writes its lane, backlog and wake-up without a sort

Revision ID: 6d2f8a4c1e93
Revises: 829e19e3d198
Create Date: 2026-12-07 21:50:00.000000+00:00

A batch is one owner's, and mostly of one kind, version and concurrency key: one lane.
``atlas_jobs_inserted`` sorted its rows three times all the same -- the distinct kinds
and owners (two ``array_agg(DISTINCT ...)``), the owners' backlog (grouped) and the
lanes (``SELECT DISTINCT``) -- 0.98 ms of a 1,000-job creation's trigger time
(``EXPLAIN ANALYZE``, PostgreSQL 18, median of 17 in one session). Its first pass now
also counts the queued and unfinished rows and asks whether every row is of one lane
(``min = max`` of each of the lane's columns, compared bytewise); when it is, the
wake-up, the backlog's count and the lane are written as one row each from those
values: 0.55 ms. Rows of several lanes take the path they took before, which this
revision keeps word for word; so do the keys.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "6d2f8a4c1e93"
down_revision: str | None = "829e19e3d198"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_ATLAS_JOBS_INSERTED = r"""
CREATE OR REPLACE FUNCTION public.atlas_jobs_inserted()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    new_queued bigint;
    new_unfinished bigint;
    one_lane boolean;
    lane_owner text;
    lane_kind text;
    lane_version integer;
    lane_key text;
    queued_kinds text[];
    queued_owners text[];
    keyed boolean;
    item text;
    ignored boolean;
BEGIN
    SELECT count(*) FILTER (WHERE n.state = 'queued'),
           count(*) FILTER (WHERE n.state NOT IN ('canceled', 'failed', 'succeeded')),
           min(n.owner COLLATE "C") = max(n.owner COLLATE "C")
               AND min(n.kind COLLATE "C") = max(n.kind COLLATE "C")
               AND min(n.kind_version) = max(n.kind_version)
               AND min(n.concurrency_key COLLATE "C") = max(n.concurrency_key COLLATE "C"),
           min(n.owner COLLATE "C"), min(n.kind COLLATE "C"), min(n.kind_version),
           min(n.concurrency_key COLLATE "C"),
           bool_or(n.concurrency_key <> '')
      INTO new_queued, new_unfinished, one_lane, lane_owner, lane_kind, lane_version, lane_key,
           keyed
      FROM new_rows AS n;
    IF one_lane THEN
        IF new_queued > 0 THEN
            ignored := pg_notify('atlas_work', lane_kind) IS NULL;
        END IF;
        IF new_unfinished > 0 THEN
            INSERT INTO owner_backlog AS b (owner, slot, unfinished)
            VALUES (lane_owner, (pg_backend_pid() & 15)::smallint, new_unfinished)
            ON CONFLICT (owner, slot) DO UPDATE SET unfinished = b.unfinished + EXCLUDED.unfinished;
        END IF;
        IF new_queued > 0 THEN
            ignored := pg_advisory_xact_lock_shared(hashtextextended('atlas.lanes:' || lane_owner, 0)) IS NULL;
            INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
            VALUES (lane_owner, lane_kind, lane_version, lane_key,
                    COALESCE((SELECT min(l.served) FROM claim_lanes AS l) - 1, 0))
            ON CONFLICT DO NOTHING;
        END IF;
    ELSE
        SELECT array_agg(DISTINCT n.kind) FILTER (WHERE n.state = 'queued'),
               array_agg(DISTINCT n.owner ORDER BY n.owner) FILTER (WHERE n.state = 'queued')
          INTO queued_kinds, queued_owners
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
$function$
"""

OLD_ATLAS_JOBS_INSERTED = r"""
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
$function$
"""


def upgrade() -> None:
    op.execute(NEW_ATLAS_JOBS_INSERTED)


def downgrade() -> None:
    op.execute(OLD_ATLAS_JOBS_INSERTED)
