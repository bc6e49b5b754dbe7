"""One read per change, shared by every waiting reader of a job (STYLE 16: fan out).

``Prefer: wait`` long-polls and event streams do not query the database per reader.
They *watch* a job through the process's :class:`FeedHub`: per watched job there is one
:class:`Feed`, subscribed once to the notifier, holding the latest
:class:`~atlas_jobs._app.services.snapshots.Snapshot`. On a change the feed reads the job once, on
one
short-lived connection, and wakes its watchers, who take the snapshot without querying.
A change arriving during a read schedules exactly one more read (the subscription's
event coalesces them); after a LISTEN reconnect every feed reads once; while the LISTEN
connection is down a feed re-reads every :data:`DEAF_POLL_SECONDS`.

When a read fails (the database is down), the feed keeps its last snapshot and retries
after the pause of the shared reconnect policy (:class:`~atlas_jobs._app.db.listen.Backoff`: 0.2 s
doubling to 5 s, with jitter), logging one warning when the outage begins and one line
when it reads again. A *first* read that fails answers its watchers like any outage:
``503`` ``database-unavailable`` + ``Retry-After``.

Reads of all feeds together hold at most ``read_slots`` pooled connections, so watchers
can never exhaust the pool. The first watcher of a job starts its feed; every watcher
that arrives before the first read finished shares it. The feed stops when its last
watcher leaves. Admission (:class:`~atlas_jobs._app.services.watch_caps.WatcherCaps`) comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import one_snapshot
from atlas_jobs._app.db.listen import DEFAULT_BACKOFF, Backoff
from atlas_jobs._app.db.outages import database_unavailable
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.services.notifier import JobChangeNotifier
from atlas_jobs._app.services.refusals import DatabaseUnavailable
from atlas_jobs._app.services.snapshots import HISTORY_PAGE, Snapshot, read_snapshot
from atlas_jobs._app.services.watch_caps import WatcherCaps

log = get_logger("atlas.api.feeds")

READ_SLOTS = 4
DEAF_POLL_SECONDS = 2.0


class Feed:
    """The shared, refreshed snapshot of one job (see the module doc)."""

    def __init__(self, hub: FeedHub, job_id: uuid.UUID) -> None:
        self.job_id = job_id
        self.watchers = 0
        self.snapshot: Snapshot | None = None
        self.first: asyncio.Future[Snapshot] = asyncio.get_running_loop().create_future()
        self._hub = hub
        self._published = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"feed:{job_id}")

    async def next_after(self, serial: int, seconds: float) -> Snapshot | None:
        """A snapshot newer than ``serial``, or ``None`` after ``seconds``."""
        snapshot = self.snapshot
        if snapshot is not None and snapshot.serial > serial:
            return snapshot
        if self._hub.is_draining():  # shutting down: nobody is held any longer
            return None
        published = self._published
        try:
            await asyncio.wait_for(published.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            return None
        snapshot = self.snapshot
        if self._hub.is_draining() and (snapshot is None or snapshot.serial <= serial):
            return None
        return snapshot

    def wake(self) -> None:
        """Wake every watcher waiting on this feed without a new snapshot (drain)."""
        published, self._published = self._published, asyncio.Event()
        published.set()

    def close(self) -> None:
        self._task.cancel()
        if not self.first.done():
            self.first.cancel()

    async def closed(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        notifier = self._hub.notifier
        failures = 0  # consecutive failed reads
        async with notifier.subscribe(self.job_id) as changes:  # before the first read
            while True:
                try:
                    snapshot = await self._hub.read(self.job_id, self.snapshot)
                except Exception as exc:
                    if not self.first.done():  # its watchers fail like a direct read
                        self.first.set_exception(exc)
                        self.first.exception()  # retrieved by them, not by the loop
                        self._hub.forget(self)
                        return
                    failures += 1
                    self._hub.read_failures += 1
                    pause = self._hub.backoff.delay(failures)
                    log.log(
                        logging.WARNING if failures == 1 else logging.DEBUG,
                        "feed.read_failed",
                        job_id=str(self.job_id),
                        error_class=type(exc).__name__,
                        consecutive_failures=failures,
                        retry_in_seconds=round(pause, 3),
                    )
                    await asyncio.sleep(pause)
                    continue
                if failures:
                    log.info("feed.read_recovered", job_id=str(self.job_id), failures=failures)
                    failures = 0
                self._publish(snapshot)
                await changes.wait(None if notifier.connected else DEAF_POLL_SECONDS)

    def _publish(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if not self.first.done():
            self.first.set_result(snapshot)
        published, self._published = self._published, asyncio.Event()
        published.set()


class Watcher:
    """One long-poll's or event stream's hold on a feed and on a watcher slot."""

    def __init__(self, hub: FeedHub, feed: Feed, key: uuid.UUID) -> None:
        self.feed = feed
        self.key = key
        self.snapshot: Snapshot | None = None
        self._hub = hub
        self._closed = False

    async def next(self, seconds: float) -> Snapshot | None:
        """The next snapshot after the one last taken, or ``None`` after ``seconds``."""
        serial = self.snapshot.serial if self.snapshot is not None else 0
        found = await self.feed.next_after(serial, seconds)
        if found is not None:
            self.snapshot = found
        return found

    def close(self) -> None:
        """Leave the feed and give the slot back (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._hub.leave(self)


class FeedHub:
    """The process's feeds, by job id, and the caps on their watchers."""

    def __init__(
        self,
        engine: AsyncEngine,
        clock: Clock,
        notifier: JobChangeNotifier,
        caps: WatcherCaps,
        *,
        read_slots: int = READ_SLOTS,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.notifier = notifier
        self.caps = caps
        self.backoff = backoff  # pause between failed feed reads (the listener's policy)
        self.reads = 0  # feed reads since start (one per change per watched job)
        self.read_failures = 0  # failed feed reads since start (not the first ones)
        self.draining = False
        self._slots = asyncio.Semaphore(read_slots)
        self._feeds: dict[uuid.UUID, Feed] = {}

    @property
    def feeds(self) -> int:
        return len(self._feeds)

    async def open(self, job_id: uuid.UUID, key: uuid.UUID) -> Watcher:
        """Admit a watcher for API key ``key`` (429 / 503 beyond the caps) and give it
        the job's current snapshot; :meth:`Watcher.close` must follow (``finally``)."""
        self.caps.admit(key)
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = Feed(self, job_id)
        feed.watchers += 1
        watcher = Watcher(self, feed, key)
        try:
            await asyncio.shield(feed.first)  # shared: one watcher leaving cancels nothing
        except Exception as exc:
            watcher.close()
            if database_unavailable(exc):  # an outage answered as such, not as a crash
                raise DatabaseUnavailable() from exc
            raise
        except BaseException:
            watcher.close()
            raise
        watcher.snapshot = feed.snapshot
        return watcher

    @contextlib.asynccontextmanager
    async def watch(self, job_id: uuid.UUID, key: uuid.UUID) -> AsyncIterator[Watcher]:
        watcher = await self.open(job_id, key)
        try:
            yield watcher
        finally:
            watcher.close()

    def leave(self, watcher: Watcher) -> None:
        self.caps.release(watcher.key)
        feed = watcher.feed
        feed.watchers -= 1
        if feed.watchers <= 0:
            feed.close()
            self.forget(feed)

    def forget(self, feed: Feed) -> None:
        if self._feeds.get(feed.job_id) is feed:
            del self._feeds[feed.job_id]

    async def read(self, job_id: uuid.UUID, previous: Snapshot | None) -> Snapshot:
        """One feed refresh, within a read slot, on a short-lived connection, in one
        snapshot: read committed would let the history read see a transition committed
        after the job read, and a stream would then send that transition while the job
        it shows is still in the state before it."""
        async with self._slots, one_snapshot(self.engine) as conn:
            self.reads += 1
            return await read_snapshot(conn, job_id, self.clock, previous)

    async def history_page(self, job_id: uuid.UUID, after_seq: int) -> list[Row[Any]]:
        """Up to :data:`HISTORY_PAGE` history rows after ``after_seq``, within a read slot
        (an event stream catching up on more than its feed holds)."""
        async with self._slots, self.engine.connect() as conn:
            return await reads.history(conn, job_id, after_seq=after_seq, limit=HISTORY_PAGE)

    def is_draining(self) -> bool:
        return self.draining

    def drain(self) -> None:
        """Shutdown has begun: every held read answers now and every event stream ends
        (its ``retry:`` hint tells the client when to reconnect, elsewhere); watchers
        arriving from now on are answered at once."""
        self.draining = True
        for feed in list(self._feeds.values()):
            feed.wake()

    async def stop(self) -> None:
        feeds = list(self._feeds.values())
        self._feeds.clear()
        for feed in feeds:
            feed.close()
        for feed in feeds:
            await feed.closed()
