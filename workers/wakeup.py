"""Flags the claim loop sleeps on, woken without a task per wait.

The claim loop waits for the first of a few things (new work announced, a slot freed, a
stop, the poll interval). Waiting on several :class:`asyncio.Event` objects at once needs
a task per event, and cancelling the losers costs more loop passes before the claim is
sent -- on the pickup path of every job that arrives at an idle worker.

A :class:`Flag` is set and cleared like an event; :func:`wait_any` parks ONE future on
every flag it waits for, plus one timer handle for the time limit: whichever comes first
resolves the future, and the waiter runs on the very next loop pass. One waiter at a time
(the claim loop): a second :func:`wait_any` on the same flag takes its place.

:class:`ClaimCooldown` bounds the herd of idle processes a notification wakes: a
leading-edge cooldown, as River's producer (``FetchCooldown``) and Oban's (dispatch
cooldown) bound their fetches.
"""

from __future__ import annotations

import asyncio


class Flag:
    """A boolean that wakes whoever is in :func:`wait_any` on it when set."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def clear(self) -> None:
        self._set = False


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def wait_any(*flags: Flag, seconds: float | None = None) -> None:
    """Return once any of ``flags`` is set (at once if one already is) or after
    ``seconds``; the flags stay as they are (the caller clears them)."""
    if any(flag.is_set() for flag in flags):
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    for flag in flags:
        flag._waiter = waiter
    timer = loop.call_later(seconds, _expire, waiter) if seconds is not None else None
    try:
        await waiter
    finally:
        for flag in flags:
            if flag._waiter is waiter:
                flag._waiter = None
        if timer is not None:
            timer.cancel()


class ClaimCooldown:
    """A window after claims that notifications triggered came back empty.

    Leading edge: a notification after the window (or with none open) is claimed at
    once; notifications inside it are coalesced into ONE claim at its end (the wake-up
    flag stays set, so nothing announced in it is lost). A window opens when a claim a
    notification triggered finds nothing AND the claim before it found nothing too: a
    process that just won a job may still receive that job's own notification (its claim
    can see a committed job before the notification arrives), and one empty claim
    after a win must not make the fleet's winner wait. ``seconds`` 0 turns it off.
    """

    __slots__ = ("_last_found", "_until", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = 0.0
        self._last_found = False

    def claimed(self, *, woken: bool, found: int) -> None:
        """Note a claim's outcome: ``woken`` by a notification, ``found`` jobs."""
        if woken and not found and not self._last_found and self.seconds > 0:
            self._until = asyncio.get_running_loop().time() + self.seconds
        self._last_found = found > 0

    def remaining(self) -> float:
        """Seconds left in the open window (0: none open)."""
        return max(0.0, self._until - asyncio.get_running_loop().time())

    async def wait(self, stopped: Flag) -> None:
        """Sleep out the open window, if any (a stop ends it early)."""
        remaining = self.remaining()
        if remaining > 0:
            await wait_any(stopped, seconds=remaining)
