"""the lane index: one bigint per lane instead of its three text columns and version

Revision ID: 2c8e4a6f0b37
Revises: 4b7d9e1f3a25
Create Date: 2026-12-03 21:50:00.000000+00:00

``ix_jobs_lanes`` (the claim's per-lane scan, one entry per queued job) keyed each entry
by ``(owner, kind, kind_version, concurrency_key, priority DESC, available_at, seq)``:
every creation inserted a wide entry compared as collated text on the way down. Now the
lane is one 64-bit hash (``hashtextextended`` of owner, kind and key, seeded with the
version) before ``priority DESC, available_at, seq``; every probe compares the hash AND
the lane's columns, so a collision shares index entries, never jobs. The claim's probes
and ``atlas_prune_lanes`` spell the same expression (app/db/schema.py ``lane_hash``).

The index is rebuilt under the migration's lock of ``jobs`` (a plain CREATE INDEX over
the queued jobs only: a partial index).
"""

from collections.abc import Sequence

from alembic import op

revision: str = "2c8e4a6f0b37"
down_revision: str | None = "4b7d9e1f3a25"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NEW_LANES_INDEX = """
CREATE INDEX ix_jobs_lanes ON jobs
    ((hashtextextended(owner || '/' || kind || '/' || concurrency_key, kind_version)),
     priority DESC, available_at, seq)
 WHERE state = 'queued'
"""

OLD_LANES_INDEX = """
CREATE INDEX ix_jobs_lanes ON jobs
    (owner, kind, kind_version, concurrency_key, priority DESC, available_at, seq)
 WHERE state = 'queued'
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
                            WHERE hashtextextended(j.owner || '/' || j.kind || '/' || j.concurrency_key, j.kind_version)
                                  = hashtextextended(l.owner || '/' || l.kind || '/' || l.concurrency_key, l.kind_version)
                              AND j.owner = l.owner AND j.kind = l.kind
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
                                WHERE hashtextextended(j.owner || '/' || j.kind || '/' || j.concurrency_key, j.kind_version)
                                      = hashtextextended(l.owner || '/' || l.kind || '/' || l.concurrency_key, l.kind_version)
                                  AND j.owner = l.owner AND j.kind = l.kind
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

OLD_ATLAS_PRUNE_LANES = r"""
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


def upgrade() -> None:
    op.execute("DROP INDEX ix_jobs_lanes")
    op.execute(NEW_LANES_INDEX)
    op.execute(NEW_ATLAS_PRUNE_LANES)


def downgrade() -> None:
    op.execute(OLD_ATLAS_PRUNE_LANES)
    op.execute("DROP INDEX ix_jobs_lanes")
    op.execute(OLD_LANES_INDEX)
