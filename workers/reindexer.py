"""The reindexer: rebuilds an index of ``jobs`` that outgrew the table's rows.

A B-tree never shrinks. Under a steady churn VACUUM removes the dead entries of
``jobs``' indexes and recycles their empty pages, so each index settles at about two
autovacuum cycles' worth of entries (docs/performance.md). A backlog is different:
half a million queued jobs, drained, leave every index of ``jobs`` at the size of the
peak, mostly empty pages, for good -- the claim, the pruner and every update then walk
and cache a tree sized for a queue that is gone.

So the sweeper, at most every :attr:`Reindexer.check_seconds`, looks for a valid B-tree
index of ``jobs`` larger than both ``min_bytes`` and ``bytes_per_row`` per live row of
the table (a fresh index of these keys takes 30-60 bytes per row, so the default bound
means several times its fresh size) and rebuilds it with ``REINDEX INDEX
CONCURRENTLY``: the table stays readable and writable throughout (the rebuild holds a
SHARE UPDATE EXCLUSIVE lock, which only conflicts with VACUUM and DDL), and the new
index replaces the old one at the end. Safety on a live system:

* one process at a time: a session-level advisory lock, try-only (another worker
  process already at it means there is nothing to do here);
* on its own autocommit connection (``REINDEX CONCURRENTLY`` cannot run in a
  transaction);
* an interrupted rebuild leaves an invalid ``<index>_ccnew`` index that every write
  still maintains; the next pass drops such leftovers (``DROP INDEX CONCURRENTLY``)
  before anything else -- under the lock, so never another reindexer's build in
  progress;
* without the privilege (the table's owner, or ``MAINTAIN`` on PostgreSQL 17+) the
  rebuild fails; that is logged once per pass and the service carries on.

The rebuild runs inside the sweeper's pass: that worker process's expiry and pruning
wait for it (seconds for the tens of MiB seen under churn; the other worker processes'
sweepers go on meanwhile).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.queries import (
    BLOATED_JOB_INDEXES,
    INDEX_BYTES,
    REBUILD_LEFTOVERS,
    REINDEX_LOCK,
    REINDEX_UNLOCK,
)
from atlas_jobs._app.logs import get_logger
from atlas_jobs._workers.interval import Interval

log = get_logger("atlas.worker.reindexer")

MIB = 2**20


@dataclass(frozen=True, slots=True)
class Rebuilt:
    index: str
    bytes_before: int
    bytes_after: int
    live_rows: int


class Reindexer:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        min_bytes: int = 64 * MIB,
        bytes_per_row: int = 512,
        check_seconds: float = 300.0,
    ) -> None:
        self.engine = single_statements(engine)
        self.min_bytes = min_bytes
        self.bytes_per_row = bytes_per_row
        self.check_seconds = check_seconds
        self._interval = Interval(check_seconds)

    async def run_if_due(self) -> list[Rebuilt]:
        """:meth:`run_once` when ``check_seconds`` passed since the last look."""
        return await self.run_once() if self._interval.due() else []

    async def run_once(self) -> list[Rebuilt]:
        """Rebuild every bloated index of ``jobs`` now (nothing if another process holds
        the reindexer's lock)."""
        async with self.engine.connect() as conn:
            if not await conn.scalar(REINDEX_LOCK):
                return []
            try:
                await self._drop_leftovers(conn)
                return await self._rebuild_bloated(conn)
            finally:
                await conn.execute(REINDEX_UNLOCK)

    async def _drop_leftovers(self, conn: AsyncConnection) -> None:
        for name in (await conn.execute(REBUILD_LEFTOVERS)).scalars().all():
            log.warning("index.rebuild_leftover_dropped", index=name)
            # The name is the catalog's own (regclass text, quoted as needed).
            await conn.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")

    async def _rebuild_bloated(self, conn: AsyncConnection) -> list[Rebuilt]:
        bounds = {"min_bytes": self.min_bytes, "bytes_per_row": self.bytes_per_row}
        bloated = (await conn.execute(BLOATED_JOB_INDEXES, bounds)).all()
        rebuilt: list[Rebuilt] = []
        for row in bloated:
            try:
                # The name is the catalog's own (regclass text, quoted as needed).
                await conn.exec_driver_sql(f"REINDEX INDEX CONCURRENTLY {row.name}")
            except Exception as exc:  # no privilege, a lock timeout: the service goes on
                log.warning("index.rebuild_failed", index=row.name, error_class=type(exc).__name__)
                break
            after = int(await conn.scalar(INDEX_BYTES, {"name": row.name}) or 0)
            done = Rebuilt(row.name, int(row.bytes), after, int(row.live_rows))
            log.info(
                "index.rebuilt",
                index=done.index,
                mib_before=round(done.bytes_before / MIB, 1),
                mib_after=round(done.bytes_after / MIB, 1),
                live_rows=done.live_rows,
            )
            rebuilt.append(done)
        return rebuilt
