"""An in-process cache of API-key lookups: most requests authenticate without a
database round trip.

Keyed by the SHA-256 digest of the presented key (the key itself is never kept), it
holds only *successful* lookups -- an unknown, malformed or revoked key always goes to
the database, so the cache can never let a key in that the database would refuse, only
keep one in for a while after its revocation. That while is the bound: an entry lives
``api_key_cache_seconds`` (default 5 s) from the lookup that stored it, so a revoked key
is refused by every API process at most that long after ``atlas-jobs keys revoke``
committed. In practice sooner: the revocation sends ``api-keys-revoked`` on the API's
LISTEN channel and every connected API process clears its cache on receipt (and after
every reconnect of that listener, since a notice may have been missed while it was
down); the TTL is the bound when the notice is lost. ``api_key_cache_seconds = 0``
turns the cache off (every request looks its key up). At most ``api_key_cache_size``
entries (default 10,000); when full, the oldest entry goes first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from atlas_jobs._app.apikeys import Principal


class KeyCache:
    """Principals by key digest, each for ``ttl_seconds`` after it was looked up."""

    def __init__(
        self,
        *,
        ttl_seconds: float,
        max_entries: int,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self._now = now
        self._entries: OrderedDict[str, tuple[float, Principal]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.ttl_seconds > 0 and self.max_entries > 0

    def get(self, digest: str) -> Principal | None:
        """The principal stored for ``digest`` if its lookup is younger than the TTL."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        expires, principal = entry
        if self._now() >= expires:
            del self._entries[digest]
            return None
        return principal

    def put(self, digest: str, principal: Principal) -> None:
        """Remember a successful lookup (the database said yes just now)."""
        if not self.enabled:
            return
        self._entries[digest] = (self._now() + self.ttl_seconds, principal)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every entry (a key was revoked somewhere)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
