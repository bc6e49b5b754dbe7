"""Wake readers when a job changes: one LISTEN connection per API process.

The database triggers send ``atlas_job_changed`` with the ids of the jobs a statement
changed (comma-separated) after every commit that bumps ``jobs.version``.
``Prefer: wait`` reads and event streams subscribe to a job id here and sleep until a
notification (or their timeout) arrives -- no polling loop against the database. If the
LISTEN connection drops, every subscriber is woken (each re-reads and goes back to
sleep) and the listener reconnects; timeouts still bound every wait, so a lost
notification costs latency, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import structlog

CHANNEL = "atlas_job_changed"
RECONNECT_SECONDS = 1.0

log = structlog.get_logger("atlas.api.notifier")


class Subscription:
    """One reader's interest in one job; :meth:`wait` returns on the next change."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """True when a change arrived, False after ``seconds``. Re-arms itself."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return False
        self._event.clear()
        return True


def _setter(event: asyncio.Event) -> Callable[[Any], None]:
    def on_terminate(_conn: Any) -> None:
        event.set()

    return on_terminate


class JobChangeNotifier:
    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def start(self, *, wait_seconds: float = 5.0) -> None:
        self._task = asyncio.create_task(self._run(), name="atlas-job-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout=wait_seconds)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._wake_all()

    @contextlib.asynccontextmanager
    async def subscribe(self, job_id: uuid.UUID) -> AsyncIterator[Subscription]:
        """Subscribe *before* reading the job, so no change can slip in between."""
        key = str(job_id)
        subscription = Subscription()
        self._subscribers[key].add(subscription)
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(key)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscribers[key]

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        # The trigger batches the ids a statement changed: "id1,id2,...".
        for job_id in payload.split(","):
            for subscription in list(self._subscribers.get(job_id, ())):
                subscription.notify()

    def _wake_all(self) -> None:
        for subscriptions in list(self._subscribers.values()):
            for subscription in list(subscriptions):
                subscription.notify()

    async def _run(self) -> None:
        while True:
            conn: Any = None
            try:
                conn = await asyncpg.connect(self._dsn)
                closed = asyncio.Event()
                conn.add_termination_listener(_setter(closed))
                await conn.add_listener(CHANNEL, self._on_notify)
                self._connected.set()
                self._wake_all()  # changes during a reconnect were missed: re-read
                await closed.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any connection failure: retry, never crash the API
                log.warning("listener_disconnected", error_type=type(exc).__name__)
            finally:
                self._connected.clear()
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await asyncio.shield(conn.close(timeout=2))
            await asyncio.sleep(RECONNECT_SECONDS)
