"""The worker process's event loop: uvloop, as uvicorn's ``loop="auto"`` gives the API.

A worker's pickup path is loop work from end to end -- the notification read from the
LISTEN socket, the wake of the claim loop, the claim sent and its answer read, the job's
task started -- and uvloop (libuv) does each loop pass and socket read/write with less
CPU than asyncio's pure-Python selector loop. uvloop comes with ``uvicorn[standard]`` and
is a dependency of its own; where it cannot be installed (Windows, PyPy) the worker runs
on asyncio's loop and behaves the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def running_loop_name() -> str:
    """The kind of the loop running now, ``uvloop`` or ``asyncio`` (the worker logs it
    at start): the top package of its class."""
    return type(asyncio.get_running_loop()).__module__.split(".", 1)[0]


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new loop of the worker's kind (as ``asyncio.run``)."""
    try:
        import uvloop  # optional: not installable everywhere (Windows, PyPy)
    except ImportError:  # pragma: no cover - installed wherever it can be
        return asyncio.run(main)
    return uvloop.run(main)
