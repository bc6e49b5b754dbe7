"""The claimer: the pool's claim loop, on a connection of its own.

While the slots have room, claim up to ``claim_batch`` jobs in one short statement
(:meth:`atlas_jobs._app.transitions.Transitions.claim`) into the local queue
(:class:`atlas_jobs._workers.slots.Slots`); when the queue has nothing for this process,
sleep until ``atlas_work`` is notified (:meth:`Claimer.wake`) or the poll interval
passes. No work ever happens inside the claim transaction.

Every idle process LISTENs, so every notification wakes them all and one wins the job.
A process whose claims after notifications came back EMPTY twice in a row (other
processes won) cools down for ``ATLAS_CLAIM_COOLDOWN_SECONDS``
(:class:`atlas_jobs._workers.wakeup.ClaimCooldown`): notifications in that window are
coalesced into one claim at its end. A process that wins keeps claiming at once, so a
lone idle process (or the fleet's winners) picks up a job on its notification with no
delay, while the losers send at most one claim per window instead of one per job.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.db.records import ClaimedJob
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.slots import Slots
from atlas_jobs._workers.wakeup import ClaimCooldown, Flag, wait_any

log = get_logger("atlas.worker.pool")

MAX_CLAIM = 100
"""Most jobs one claim statement takes (short row locks, a bounded statement)."""


class Claimer:
    """Claims jobs for one pool's :class:`~atlas_jobs._workers.slots.Slots`."""

    def __init__(
        self,
        statements: AsyncEngine,
        transitions: Transitions,
        slots: Slots,
        *,
        worker_id: str,
        handlers: Iterable[str],
        claim_batch: int | None,
        cooldown_seconds: float,
        poll_interval_seconds: float,
        context: Callable[[ClaimedJob], JobContext],
    ) -> None:
        self.statements = statements
        self.transitions = transitions
        self.slots = slots
        self.worker_id = worker_id
        self.keys = sorted(handlers)
        self.context = context
        """Makes the context of a claimed attempt (the runner's)."""
        self.poll_interval_seconds = poll_interval_seconds
        concurrency, prefetch = slots.concurrency, slots.prefetch
        self.claim_batch = claim_batch or min(concurrency + prefetch, MAX_CLAIM)
        self.min_claim = max(1, min(concurrency, self.claim_batch) // 4)
        # While prefetching, the local queue keeps the slots fed during a claim: wait
        # until half a batch is free (fewer, larger claims) instead of claiming per slot.
        self.min_claim_busy = (
            max(self.min_claim, self.claim_batch // 2) if prefetch else self.min_claim
        )
        # What the claim loop sleeps on: one future for all of them, no task per wait.
        self.woken = Flag()
        """New work was announced (or the LISTEN connection came back)."""
        self.stopped = Flag()
        """The pool's ``stop`` was set (mirrored by the pool)."""
        self.cooldown = ClaimCooldown(cooldown_seconds)
        """After notified claims found nothing: coalesce the next notifications."""
        self._rescan = False
        """The wake-up is the LISTEN connection's (re)connect, not a notification."""
        self._conn: AsyncConnection | None = None
        """The claims' connection, kept between claims (:meth:`_claim`)."""

    def wake(self) -> None:
        """New work was announced."""
        self.woken.set()

    def listening(self) -> None:
        """The LISTEN connection is (back) up: claim, since jobs queued meanwhile were
        announced to nobody -- a claim no notification asked for, so one that finds
        nothing lost no race (:class:`atlas_jobs._workers.wakeup.ClaimCooldown`)."""
        self._rescan = True
        self.woken.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Claim until ``stop`` is set."""
        slots = self.slots
        try:
            while not stop.is_set():
                room = slots.room()
                least = self.min_claim_busy if slots.busy else self.min_claim
                if room <= 0 or (slots.occupied() and room < least):
                    # Wait for a worthwhile batch rather than claiming jobs one by one
                    # while others are finishing (they free their slots within moments).
                    slots.freed.clear()
                    await wait_any(self.stopped, slots.freed)
                    continue
                want = min(room, self.claim_batch)
                woken = self.woken.is_set() and not self._rescan
                self.woken.clear()  # before claiming: a notify during the claim is kept
                self._rescan = False
                try:
                    claimed = await self._claim(want)
                except Exception as exc:  # database unreachable: back off, keep going
                    log.warning("claim.failed", error_class=type(exc).__name__)
                    await wait_any(self.stopped, seconds=self.poll_interval_seconds)
                    continue
                self.cooldown.claimed(woken=woken, found=len(claimed))
                # Prefetch only while the queue is busy: a short claim means there is no
                # backlog for this process to take ahead of the others.
                slots.busy = len(claimed) == want
                slots.add(self.context(job) for job in claimed)
                if len(claimed) < want:
                    await wait_any(self.stopped, self.woken, seconds=self.poll_interval_seconds)
                    if self.woken.is_set():
                        await self.cooldown.wait(self.stopped)
        finally:
            await self.close()

    async def _claim(self, want: int) -> list[ClaimedJob]:
        """One claim statement on the claims' own connection.

        It stays checked out between claims: no checkout and check-in per claim, on the
        pickup path of every job that arrives at an idle worker (docs/performance.md,
        "Figures behind the code"). A failed claim closes it (the pool discards a broken
        one); the next claim takes another."""
        if self._conn is None:
            self._conn = await self.statements.connect()
        try:
            return await self.transitions.claim_to_run(
                self._conn, worker_id=self.worker_id, handlers=self.keys, limit=want
            )
        except Exception:
            await self.close()
            raise

    async def close(self) -> None:
        """Hand the claims' connection back to the pool; never raises."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(conn.close())
