"""A held read whose client leaves: its hold is cancelled at once, which gives its
watcher slot back, rather than when the wait would end."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from starlette.types import Receive

T = TypeVar("T")


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (a request without a body: nothing else comes)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(receive: Receive, hold: Coroutine[Any, Any, T]) -> T | None:
    """``hold``'s result, or ``None`` as soon as the client disconnects -- then ``hold``
    is cancelled, and its ``finally`` gives the watcher slot back at once."""
    held = asyncio.ensure_future(hold)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({held, gone}, return_when=asyncio.FIRST_COMPLETED)
        if held.done():
            return held.result()
        held.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await held
        return None
    finally:
        for task in (held, gone):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gone
