"""scheduling: priority, fair share across lanes, concurrency keys, operator settings

Revision ID: 5d1a9c3e7b20
Revises: 5c1d2e3f4a6b
Create Date: 2026-12-02 06:30:00.000000+00:00

``jobs`` gains ``priority`` (0-9, default 4), ``concurrency_key`` ('' for none) and
``concurrency_limit`` (the limit the job's kind declared), and the partial index
``ix_jobs_lanes`` the claim scans per lane. New tables: ``claim_lanes`` (one row per
owner, kind@version and concurrency key with queued work, and its virtual time
``served``), ``concurrency_keys`` (per key: running count, declared and operator limits,
start rate and its token bucket), ``owner_shares`` and ``scheduling_changes`` (the
operators' settings and their audit trail). ``schedules`` keep the priority and the
concurrency key their jobs are created with.

The jobs triggers now keep ``claim_lanes`` (a lane is added when a job of it is queued,
under its owner's lanes lock held shared) and ``concurrency_keys.running`` (a job with a
key entering or leaving running/cancel_requested) exact; ``atlas_prune_lanes`` removes
empty lanes for the sweeper. Existing queued jobs get their lanes here.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "5d1a9c3e7b20"
down_revision: str | None = "5c1d2e3f4a6b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LANES_STORAGE = {
    "fillfactor": "50",
    "autovacuum_vacuum_scale_factor": "0",
    "autovacuum_vacuum_threshold": "500",
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

NEW_ATLAS_BACKLOG_JOBS_TRUNCATED = r"""
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

NEW_ATLAS_JOBS_INSERTED = r"""
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
    INSERT INTO concurrency_keys (key, declared_limit)
    SELECT DISTINCT ON (n.concurrency_key) n.concurrency_key, n.concurrency_limit
      FROM new_rows AS n
     WHERE n.concurrency_key <> ''
     ORDER BY n.concurrency_key
    ON CONFLICT DO NOTHING;
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

NEW_ATLAS_PRUNE_LANES = r"""
CREATE OR REPLACE FUNCTION public.atlas_prune_lanes(up_to integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    lane record;
    pruned integer := 0;
    gone integer;
BEGIN
    FOR lane IN
        SELECT l.owner, l.kind, l.kind_version, l.concurrency_key
          FROM claim_lanes AS l
         WHERE NOT EXISTS (SELECT 1 FROM jobs AS j
                            WHERE j.owner = l.owner AND j.kind = l.kind
                              AND j.kind_version = l.kind_version
                              AND j.concurrency_key = l.concurrency_key
                              AND j.state = 'queued')
         ORDER BY l.served
         LIMIT up_to
    LOOP
        IF pg_try_advisory_xact_lock(hashtextextended('atlas.lanes:' || lane.owner, 0)) THEN
            DELETE FROM claim_lanes AS l
             WHERE (l.owner, l.kind, l.kind_version, l.concurrency_key)
                   = (lane.owner, lane.kind, lane.kind_version, lane.concurrency_key)
               AND NOT EXISTS (SELECT 1 FROM jobs AS j
                                WHERE j.owner = l.owner AND j.kind = l.kind
                                  AND j.kind_version = l.kind_version
                                  AND j.concurrency_key = l.concurrency_key
                                  AND j.state = 'queued');
            GET DIAGNOSTICS gone = ROW_COUNT;
            pruned := pruned + gone;
        END IF;
    END LOOP;
    RETURN pruned;
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
                   AND EXISTS (SELECT 1 FROM job_webhooks AS jw WHERE jw.job_id = n.id))
      INTO changed_ids, queued_kinds, counts, one_owner, one_delta, delivers
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
        "jobs",
        sa.Column("priority", sa.SmallInteger(), server_default=sa.text("4"), nullable=False),
    )
    op.add_column(
        "jobs",
        sa.Column("concurrency_key", sa.Text(), server_default=sa.text("''"), nullable=False),
    )
    op.add_column("jobs", sa.Column("concurrency_limit", sa.Integer(), nullable=True))
    op.add_column("schedules", sa.Column("priority", sa.SmallInteger(), nullable=True))
    op.add_column("schedules", sa.Column("concurrency_key", sa.Text(), nullable=True))
    op.create_index(
        "ix_jobs_lanes",
        "jobs",
        [
            "owner",
            "kind",
            "kind_version",
            "concurrency_key",
            sa.text("priority DESC"),
            "available_at",
            "seq",
        ],
        postgresql_where=sa.text("state = 'queued'"),
    )
    op.create_table(
        "claim_lanes",
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("kind_version", sa.Integer(), nullable=False),
        sa.Column("concurrency_key", sa.Text(), nullable=False),
        sa.Column("served", sa.Double(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint(
            "owner", "kind", "kind_version", "concurrency_key", name=op.f("pk_claim_lanes")
        ),
        postgresql_with=LANES_STORAGE,
    )
    op.create_index("ix_claim_lanes_served", "claim_lanes", ["served"])
    op.create_table(
        "concurrency_keys",
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("declared_limit", sa.Integer(), nullable=True),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("running", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("rate", sa.Integer(), nullable=True),
        sa.Column("period_seconds", sa.Double(), nullable=True),
        sa.Column("tokens", sa.Double(), nullable=True),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_by", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "(declared_limit IS NULL OR declared_limit >= 1)"
            " AND (max_running IS NULL OR max_running >= 0)",
            name=op.f("ck_concurrency_keys_limits_valid"),
        ),
        sa.CheckConstraint(
            "(rate IS NULL) = (period_seconds IS NULL) AND (rate IS NULL OR rate >= 1) "
            "AND (period_seconds IS NULL OR period_seconds > 0)",
            name=op.f("ck_concurrency_keys_rate_valid"),
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_concurrency_keys")),
        postgresql_with=LANES_STORAGE,
    )
    op.create_table(
        "owner_shares",
        sa.Column("owner", sa.Text(), nullable=False),
        sa.Column("share", sa.Integer(), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("share BETWEEN 1 AND 1000", name=op.f("ck_owner_shares_share_in_range")),
        sa.PrimaryKeyConstraint("owner", name=op.f("pk_owner_shares")),
    )
    op.create_table(
        "scheduling_changes",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column(
            "at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("setting", sa.Text(), nullable=False),
        sa.Column("subject", sa.Text(), nullable=False),
        sa.Column("before", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("after", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "setting IN ('owner_share', 'concurrency_key')",
            name=op.f("ck_scheduling_changes_setting_known"),
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_scheduling_changes")),
    )
    op.create_index(
        "ix_scheduling_changes_setting_subject",
        "scheduling_changes",
        ["setting", "subject", "seq"],
    )
    for text in (
        NEW_ATLAS_BACKLOG_JOBS_DELETED,
        NEW_ATLAS_BACKLOG_JOBS_TRUNCATED,
        NEW_ATLAS_JOBS_INSERTED,
        NEW_ATLAS_JOBS_UPDATED,
        NEW_ATLAS_PRUNE_LANES,
    ):
        op.execute(text)
    # The lanes of the jobs queued now (no writer adds one meanwhile: jobs is locked).
    op.execute("LOCK TABLE jobs IN SHARE MODE")
    op.execute("""
INSERT INTO claim_lanes (owner, kind, kind_version, concurrency_key, served)
SELECT DISTINCT owner, kind, kind_version, concurrency_key, 0 FROM jobs WHERE state = 'queued'
""")


def downgrade() -> None:
    for text in (
        OLD_ATLAS_BACKLOG_JOBS_DELETED,
        OLD_ATLAS_BACKLOG_JOBS_TRUNCATED,
        OLD_ATLAS_JOBS_INSERTED,
        OLD_ATLAS_JOBS_UPDATED,
    ):
        op.execute(text)
    op.execute("DROP FUNCTION atlas_prune_lanes(integer)")
    op.drop_index("ix_scheduling_changes_setting_subject", table_name="scheduling_changes")
    op.drop_table("scheduling_changes")
    op.drop_table("owner_shares")
    op.drop_table("concurrency_keys")
    op.drop_index("ix_claim_lanes_served", table_name="claim_lanes")
    op.drop_table("claim_lanes")
    op.drop_index("ix_jobs_lanes", table_name="jobs")
    op.drop_column("schedules", "concurrency_key")
    op.drop_column("schedules", "priority")
    op.drop_column("jobs", "concurrency_limit")
    op.drop_column("jobs", "concurrency_key")
    op.drop_column("jobs", "priority")
