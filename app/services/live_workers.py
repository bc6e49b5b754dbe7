"""What this API process knows of the live worker processes and the paused kinds,
refreshed in the background.

One task per API process reads :func:`atlas_jobs._app.db.reads.live_workers` (one
statement over the worker registry's few rows) every
``ATLAS_LIVE_WORKERS_REFRESH_SECONDS`` and keeps the answer, the way the metrics
sampler keeps the queue gauges. A status body (:func:`atlas_jobs._app.services.views.waiting_for`)
and ``GET /v1/kinds`` read the kept answer: no status read ever queries the registry,
and what they say is at most one refresh old. Until the first read has answered, nothing
is known and no job is said to wait for a worker. The paused kinds
(:func:`atlas_jobs._app.db.pauses.paused`, a few rows) are read by the same refresh, so a
queued job of a paused kind says so (``waiting_for``: ``paused``); the claim itself reads
the pauses, never this copy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import pauses, reads
from atlas_jobs._app.db.pauses import Pause

log = structlog.get_logger("atlas.api.live_workers")

READ_TIMEOUT_SECONDS = 5.0


@dataclass(eq=False)
class LiveWorkers:
    """The last read: live worker processes per ``kind@version`` key (``None`` before
    the first read answered)."""

    counts: Mapping[str, int] | None = None
    read_at: float | None = None  # time.monotonic() of the last successful read
    pauses: tuple[Pause, ...] = ()

    def pause_of(self, kind: str, version: int) -> Pause | None:
        """The pause holding ``kind@version`` (one version's before every version's)."""
        held = [p for p in self.pauses if p.covers(kind, version)]
        return max(held, key=lambda p: p.version is not None) if held else None

    def serving(self, key: str) -> int | None:
        """Live workers serving ``key``; ``None`` while nothing is known."""
        if self.counts is None:
            return None
        return self.counts.get(key, 0)


_installed: list[LiveWorkers] = []


def install(live: LiveWorkers) -> None:
    """Make ``live`` what this process's status bodies read (the app's lifespan)."""
    _installed.append(live)


def uninstall(live: LiveWorkers) -> None:
    if live in _installed:
        _installed.remove(live)


def current() -> LiveWorkers | None:
    """The process's live-worker snapshot (the newest installed), if an API runs here."""
    return _installed[-1] if _installed else None


async def refresh_once(
    engine: AsyncEngine, clock: Clock, live: LiveWorkers, *, window_seconds: float
) -> None:
    async with asyncio.timeout(READ_TIMEOUT_SECONDS), engine.connect() as conn:
        counts = await reads.live_workers(conn, clock.now(), window_seconds=window_seconds)
        paused = await pauses.paused(conn)
    live.counts = MappingProxyType(counts)
    live.pauses = tuple(paused)
    live.read_at = time.monotonic()


async def run_refresher(
    engine: AsyncEngine,
    clock: Clock,
    live: LiveWorkers,
    *,
    every_seconds: float,
    window_seconds: float,
) -> None:
    """Refresh until cancelled; a failed read keeps the previous answer and logs one
    warning (a database that cannot answer this cannot answer a status read either)."""
    while True:
        try:
            await refresh_once(engine, clock, live, window_seconds=window_seconds)
        except Exception as exc:
            log.warning("live_workers.read_failed", error_class=type(exc).__name__)
        await asyncio.sleep(every_seconds)
