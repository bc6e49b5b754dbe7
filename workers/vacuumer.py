"""The vacuumer: VACUUM of the hot tables once their dead row versions pass a bound
(table bloat, one of the performance goals).

Every state change of a job writes a new version of its ``jobs`` row (none is HOT:
``state`` is in the partial indexes' predicates), an ``attempts`` version or two, and
history rows that pruning later deletes. Autovacuum visits a database once per
``autovacuum_naptime`` (60 s by default, server-wide, not settable per table): under a
fast churn the tables and their indexes hold that whole interval's dead versions, so
their size grows with the churn rate (docs/performance.md, "Bloat").

So the sweeper, at most every :attr:`Vacuumer.check_seconds`, reads the statistics'
dead row counts of ``jobs``, ``job_history`` and ``attempts`` and runs ``VACUUM`` on each
that holds at least ``dead_rows`` of them: the tables then hold about that many dead
versions whatever the rate. Safety on a live system:

* one process at a time: a session-level advisory lock, try-only (another worker process
  already at it means there is nothing to do here);
* on its own autocommit connection (``VACUUM`` cannot run in a transaction);
* ``SKIP_LOCKED``: a table that autovacuum (or anything else conflicting) holds is left
  to it;
* without the privilege (the table's owner, or ``MAINTAIN`` on PostgreSQL 17+)
  PostgreSQL only warns and skips the table; any error is logged and the service
  carries on.

The vacuum runs inside the sweeper's pass: that worker process's expiry and pruning wait
for it (a VACUUM of these tables visits only pages with dead versions, fractions of a
second at the default bound).
"""

from __future__ import annotations

import time

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.db.queries import DEAD_ROWS, VACUUM_LOCK, VACUUM_UNLOCK
from atlas_jobs._app.logs import get_logger
from atlas_jobs._workers.interval import Interval

log = get_logger("atlas.worker.vacuumer")

HOT_TABLES = frozenset({"jobs", "job_history", "attempts"})
"""The only names ever interpolated into a VACUUM statement."""


class Vacuumer:
    def __init__(
        self, engine: AsyncEngine, *, dead_rows: int = 50_000, check_seconds: float = 10.0
    ) -> None:
        self.engine = single_statements(engine)
        self.dead_rows = dead_rows
        self.check_seconds = check_seconds
        self._interval = Interval(check_seconds)

    async def run_if_due(self) -> list[str]:
        """:meth:`run_once` when ``check_seconds`` passed since the last look."""
        return await self.run_once() if self._interval.due() else []

    async def run_once(self) -> list[str]:
        """VACUUM every hot table with at least ``dead_rows`` dead versions now; the
        tables vacuumed (none if another process holds the vacuumer's lock)."""
        async with self.engine.connect() as conn:
            if not await conn.scalar(VACUUM_LOCK):
                return []
            try:
                due = (await conn.execute(DEAD_ROWS, {"dead_rows": self.dead_rows})).all()
                vacuumed: list[str] = []
                for row in due:
                    if row.name not in HOT_TABLES:  # never anything else
                        continue
                    started = time.monotonic()
                    try:
                        await conn.exec_driver_sql(f"VACUUM (SKIP_LOCKED) {row.name}")
                    except Exception as exc:  # a lock timeout, a cancel: the service goes on
                        log.warning(
                            "table.vacuum_failed", table=row.name, error_class=type(exc).__name__
                        )
                        break
                    log.info(
                        "table.vacuumed",
                        table=row.name,
                        dead_rows=int(row.dead),
                        seconds=round(time.monotonic() - started, 3),
                    )
                    vacuumed.append(row.name)
                return vacuumed
            finally:
                await conn.execute(VACUUM_UNLOCK)
