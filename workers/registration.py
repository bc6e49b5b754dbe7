"""The worker process's row in the worker registry (``worker_processes``).

What ``GET /v1/kinds`` counts and what a queued job's ``waiting_for`` is decided from:
which live processes serve which ``kind@version``. :meth:`Registration.run_once`
upserts the row (at start, then every ``ATLAS_WORKER_HEARTBEAT_SECONDS`` on the pool's
heartbeat connection: one small statement per interval, never per job, never on the
claim path); :meth:`Registration.withdraw` deletes it when the process stops claiming
on a clean shutdown. A process that dies without withdrawing stops beating: readers
stop counting it after ``ATLAS_WORKER_LIVE_WINDOW_SECONDS`` and the sweeper deletes the
row later (:func:`atlas_jobs._app.db.workers.forget_dead`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import workers
from atlas_jobs._app.logs import get_logger

log = get_logger("atlas.worker.registration")

WITHDRAW_TIMEOUT_SECONDS = 2.0
"""A shutdown does not wait longer than this for the row's deletion (an unreachable
database: the row ages out of the live window instead)."""


class Registration:
    def __init__(
        self,
        engine: AsyncEngine,
        clock: Clock,
        *,
        worker_id: str,
        serves: Iterable[str],
        concurrency: int,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.worker_id = worker_id
        self.serves = sorted(serves)
        self.concurrency = concurrency
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.beats = 0

    async def run_once(self) -> None:
        """Register, or refresh the heartbeat (one statement, autocommit)."""
        async with self.engine.begin() as conn:
            await workers.beat(
                conn,
                self.clock,
                worker_id=self.worker_id,
                host=self.host,
                pid=self.pid,
                serves=self.serves,
                concurrency=self.concurrency,
            )
        self.beats += 1

    async def withdraw(self) -> None:
        """Delete the row; never raises (a failure leaves it to age out)."""
        try:
            async with asyncio.timeout(WITHDRAW_TIMEOUT_SECONDS), self.engine.begin() as conn:
                await workers.withdraw(conn, self.worker_id)
        except Exception as exc:
            log.warning("registration.withdraw_failed", error_class=type(exc).__name__)


async def stop_beating(task: asyncio.Task[None] | None) -> None:
    """Cancel the beat loop and wait for it (a beat in flight ends first or is cut)."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
