"""Wake-ups for idle claimers: LISTEN ``atlas_work`` on a dedicated asyncpg connection.

The trigger on ``jobs`` notifies ``atlas_work`` with the kind whenever a job becomes
queued. A notification only says "look now"; the claim query decides. Notifications
can be lost (the connection drops, the listener reconnects), which is why the claimer
also polls every ``ATLAS_POLL_INTERVAL_SECONDS``: a lost notification only delays work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

import asyncpg

from app.logs import get_logger

log = get_logger("atlas.worker.listener")

CHANNEL = "atlas_work"


class WorkListener:
    """Keeps one LISTEN connection open (reconnecting) and calls ``wake`` on new work."""

    def __init__(
        self,
        dsn: str,
        *,
        kinds: Collection[str],
        wake: Callable[[], None],
        retry_seconds: float = 1.0,
    ) -> None:
        self.dsn = dsn
        self.kinds = frozenset(kinds)
        self.wake = wake
        self.retry_seconds = retry_seconds

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        if not self.kinds or payload in self.kinds:
            self.wake()

    async def run(self) -> None:
        """Listen until cancelled; reconnect after a dropped connection."""
        while True:
            closed = asyncio.Event()
            try:
                conn = await asyncpg.connect(
                    self.dsn, server_settings={"application_name": "atlas-listener"}
                )
            except (OSError, asyncpg.PostgresError) as exc:
                log.warning("listener.connect_failed", error_class=type(exc).__name__)
                await asyncio.sleep(self.retry_seconds)
                continue
            try:
                conn.add_termination_listener(_setter(closed))
                await conn.add_listener(CHANNEL, self._on_notify)
                self.wake()  # anything queued while we were not listening
                await closed.wait()
                log.warning("listener.connection_lost")
            finally:
                if not conn.is_closed():
                    await conn.close(timeout=2)
            await asyncio.sleep(self.retry_seconds)


def _setter(event: asyncio.Event) -> Callable[[object], None]:
    return lambda _conn: event.set()
