"""declared start rates: a kind's concurrency may declare a start rate

A kind declares ``Concurrency(rate=Rate(starts, per_seconds))``; each job carries it
(``jobs.concurrency_rate``, ``jobs.concurrency_period_seconds``), and the insert trigger
creates the job's key with it: recorded as ``concurrency_keys.declared_rate`` /
``declared_period_seconds`` and put in force as ``rate`` / ``period_seconds``. An
operator's rate replaces the one in force; clearing it brings the declared one back.
Adding nullable columns rewrites nothing.

Revision ID: 8a4c6e2f1b3d
Revises: 8f3a2b1c4d5e
Create Date: 2026-12-02 18:30:00.000000+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "8a4c6e2f1b3d"
down_revision: str | None = "8f3a2b1c4d5e"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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


def upgrade() -> None:
    op.execute(
        "ALTER TABLE jobs ADD COLUMN concurrency_rate integer,"
        " ADD COLUMN concurrency_period_seconds double precision"
    )
    op.execute(
        "ALTER TABLE concurrency_keys ADD COLUMN declared_rate integer,"
        " ADD COLUMN declared_period_seconds double precision,"
        " ADD CONSTRAINT ck_concurrency_keys_declared_rate_valid CHECK ("
        "(declared_rate IS NULL) = (declared_period_seconds IS NULL)"
        " AND (declared_rate IS NULL OR declared_rate >= 1)"
        " AND (declared_period_seconds IS NULL OR declared_period_seconds > 0))"
    )
    op.execute(NEW_ATLAS_JOBS_INSERTED)


def downgrade() -> None:
    op.execute(OLD_ATLAS_JOBS_INSERTED)
    op.execute(
        "ALTER TABLE concurrency_keys DROP CONSTRAINT ck_concurrency_keys_declared_rate_valid,"
        " DROP COLUMN declared_period_seconds, DROP COLUMN declared_rate"
    )
    op.execute(
        "ALTER TABLE jobs DROP COLUMN concurrency_period_seconds, DROP COLUMN concurrency_rate"
    )
