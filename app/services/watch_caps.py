"""How many long-polls and event streams one process holds: per API key and in all.

Every ``Prefer: wait`` read and every event stream is a *watcher* for as long as it is
open. Beyond ``per_key`` watchers for one API key the next is answered ``429``; beyond
``total`` in the process, ``503`` -- both with ``Retry-After``. A slot is taken before
anything is read and given back in a ``finally``, whatever ends the watcher.
"""

from __future__ import annotations

import uuid
from collections import Counter

from atlas_jobs._app.services.refusals import TooManyWatchers, WatchersExhausted

RETRY_AFTER_SECONDS = 5


class WatcherCaps:
    def __init__(self, *, per_key: int, total: int) -> None:
        self.per_key = per_key
        self.total = total
        self._by_key: Counter[uuid.UUID] = Counter()
        self._count = 0

    @property
    def watching(self) -> int:
        return self._count

    def admit(self, key: uuid.UUID) -> None:
        """Take a slot for ``key`` or raise the 429 / 503 problem."""
        if self._by_key[key] >= self.per_key:
            raise TooManyWatchers(
                f"This API key already holds {self.per_key} long-polls and event streams",
                retry_after=RETRY_AFTER_SECONDS,
            )
        if self._count >= self.total:
            raise WatchersExhausted(
                f"This server already holds {self.total} long-polls and event streams",
                retry_after=RETRY_AFTER_SECONDS,
            )
        self._by_key[key] += 1
        self._count += 1

    def release(self, key: uuid.UUID) -> None:
        self._count -= 1
        self._by_key[key] -= 1
        if self._by_key[key] <= 0:
            del self._by_key[key]
