"""Wake-ups for idle claimers: LISTEN ``atlas_work`` on a dedicated connection.

The trigger on ``jobs`` notifies ``atlas_work`` with the kind whenever a job becomes
queued. A notification only says "look now"; the claim query decides. The connection is
the shared :class:`atlas_jobs._app.db.listen.Listener` (one reconnect and backoff policy for the API
and the workers); after every (re)connect the claim loop is woken (``on_connected``,
``wake`` unless given), since jobs queued while the connection was down were announced
to nobody. The claimer also polls every
``ATLAS_POLL_INTERVAL_SECONDS``, so even a lost notification only delays work.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from atlas_jobs._app.db.listen import Listener

CHANNEL = "atlas_work"
APPLICATION_NAME = "atlas-listener"


class WorkListener:
    """Keeps one LISTEN connection open (reconnecting) and calls ``wake`` on new work."""

    def __init__(
        self,
        dsn: str,
        *,
        kinds: Collection[str],
        wake: Callable[[], None],
        on_connected: Callable[[], None] | None = None,
        application_name: str = APPLICATION_NAME,
    ) -> None:
        self.dsn = dsn
        self.kinds = frozenset(kinds)
        self.wake = wake
        self.listener = Listener(
            dsn,
            CHANNEL,
            on_payload=self._on_payload,
            # anything queued while we were not listening
            on_connected=on_connected or wake,
            application_name=application_name,
        )

    def _on_payload(self, payload: str) -> None:
        if not self.kinds or payload in self.kinds:
            self.wake()

    async def run(self) -> None:
        """Listen until cancelled; reconnect after any failure."""
        await self.listener.run()
