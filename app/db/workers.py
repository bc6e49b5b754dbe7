"""The worker registry's writes: each worker process's own row of ``worker_processes``.

A worker process upserts its row when it starts and on every registry heartbeat (ONE
statement: a row pruned while the process was frozen comes back on its next beat),
deletes it on a clean shutdown, and its sweeper deletes the rows of processes dead for
long. Reads are in :func:`atlas_jobs._app.db.reads.live_workers`. Database time
(:class:`~atlas_jobs._app.clock.Clock`) throughout, as for leases.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import delete, literal
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import worker_processes


async def beat(
    conn: AsyncConnection,
    clock: Clock,
    *,
    worker_id: str,
    host: str,
    pid: int,
    serves: Iterable[str],
    concurrency: int,
) -> None:
    """Register the process or refresh its heartbeat (``started_at`` is kept)."""
    now = clock.now()
    statement = pg_insert(worker_processes).values(
        worker_id=worker_id,
        host=host,
        pid=pid,
        started_at=now,
        heartbeat_at=now,
        serves=sorted(serves),
        concurrency=concurrency,
    )
    excluded = statement.excluded
    await conn.execute(
        statement.on_conflict_do_update(
            index_elements=[worker_processes.c.worker_id],
            set_={
                "heartbeat_at": excluded.heartbeat_at,
                "serves": excluded.serves,
                "concurrency": excluded.concurrency,
                "host": excluded.host,
                "pid": excluded.pid,
            },
        )
    )


async def withdraw(conn: AsyncConnection, worker_id: str) -> bool:
    """A clean shutdown: the process's row is deleted (it serves nothing any more)."""
    result = await conn.execute(
        delete(worker_processes).where(worker_processes.c.worker_id == worker_id)
    )
    return bool(result.rowcount)


async def forget_dead(conn: AsyncConnection, clock: Clock, *, after_seconds: float) -> int:
    """Delete the rows of processes whose last heartbeat is ``after_seconds`` old."""
    cutoff = clock.now() - literal(timedelta(seconds=after_seconds), INTERVAL())
    result = await conn.execute(
        delete(worker_processes).where(worker_processes.c.heartbeat_at < cutoff)
    )
    return int(result.rowcount or 0)


__all__ = ["beat", "forget_dead", "withdraw"]
