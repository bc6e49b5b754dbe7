"""At most once per interval: the gate of the sweeper's slower maintenance steps (the
vacuumer, the reindexer), which run inside its every-few-seconds pass."""

from __future__ import annotations

import time


class Interval:
    """:meth:`due` is true at the first call and then once every ``seconds`` (monotonic)."""

    __slots__ = ("_next", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.seconds
        return True
