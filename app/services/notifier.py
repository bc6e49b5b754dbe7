"""Wake readers when a job changes: one LISTEN connection per API process.

The database triggers send ``atlas_job_changed`` with the ids of the jobs a statement
changed (comma-separated) after every commit that bumps ``jobs.version``.
The one subscriber per watched job is its :class:`atlas_jobs._app.services.feeds.Feed`: it sleeps
here
until a notification arrives, then reads the job once for every long-poll and event
stream watching it -- no polling loop against the database, no read per reader.

The same channel carries ``api-keys-revoked`` (:func:`atlas_jobs._app.apikeys.revoke_key`): the
API's key cache is cleared at once (:mod:`atlas_jobs._app.api.keycache`).

The connection is the shared :class:`atlas_jobs._app.db.listen.Listener` (one reconnect and backoff
policy for the API and the workers). After every (re)connect every subscriber is woken:
changes made while the connection was down were never announced, so each feed re-reads
once and goes back to sleep. Timeouts still bound every wait, so a lost notification costs
latency, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable

from atlas_jobs._app.apikeys import API_PROCESS_CHANNEL, KEYS_REVOKED_NOTICE
from atlas_jobs._app.db.listen import Listener

CHANNEL = API_PROCESS_CHANNEL
APPLICATION_NAME = "atlas-api-listener"


class Subscription:
    """One reader's interest in one job; :meth:`wait` returns on the next change."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self, seconds: float | None) -> bool:
        """True when a change arrived, False after ``seconds`` (``None``: no limit).
        Re-arms itself; changes that arrive before the next call wake it once."""
        try:
            timeout = None if seconds is None else max(0.0, seconds)
            await asyncio.wait_for(self._event.wait(), timeout=timeout)
        except TimeoutError:
            return False
        self._event.clear()
        return True


class JobChangeNotifier:
    def __init__(self, dsn: str, *, application_name: str = APPLICATION_NAME) -> None:
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)
        self.on_keys_revoked: Callable[[], None] | None = None
        """Called when a key was revoked, and after every (re)connect (a revocation may
        have gone unannounced meanwhile): the API clears its key cache."""
        self.listener = Listener(
            dsn,
            CHANNEL,
            on_payload=self._on_payload,
            on_connected=self._wake_all,
            application_name=application_name,
        )

    @property
    def connected(self) -> bool:
        return self.listener.connected

    async def start(self, *, wait_seconds: float = 5.0) -> None:
        """Start listening; wait up to ``wait_seconds`` for the first connection (the
        API starts anyway and the listener keeps trying)."""
        self.listener.start()
        await self.listener.wait_connected(wait_seconds)

    async def stop(self) -> None:
        await self.listener.stop()
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

    def _on_payload(self, payload: str) -> None:
        if payload == KEYS_REVOKED_NOTICE:
            self._keys_revoked()
            return
        # The trigger batches the ids a statement changed: "id1,id2,...".
        for job_id in payload.split(","):
            for subscription in list(self._subscribers.get(job_id, ())):
                subscription.notify()

    def _keys_revoked(self) -> None:
        if self.on_keys_revoked is not None:
            self.on_keys_revoked()

    def _wake_all(self) -> None:
        self._keys_revoked()
        for subscriptions in list(self._subscribers.values()):
            for subscription in list(subscriptions):
                subscription.notify()
