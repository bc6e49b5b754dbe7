"""Flags the claim loop sleeps on, woken without a task per wait.

The claim loop waits for the first of a few things (new work announced, a slot freed, a
stop, the poll interval). Waiting on several :class:`asyncio.Event` objects at once needs
a task per event, and cancelling the losers costs more loop passes before the claim is
sent -- on the pickup path of every job that arrives at an idle worker.

A :class:`Flag` is set and cleared like an event; :func:`wait_any` parks ONE future on
every flag it waits for, plus one timer handle for the time limit: whichever comes first
resolves the future, and the waiter runs on the very next loop pass. One waiter at a time
(the claim loop): a second :func:`wait_any` on the same flag takes its place.
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
