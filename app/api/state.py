"""What one API process holds for its lifetime (built in the app's lifespan)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.feeds import FeedHub
from app.api.keycache import KeyCache
from app.api.metrics import ApiMetrics
from app.api.notifier import JobChangeNotifier
from app.clock import Clock
from app.db.engine import AutocommitConnections
from app.settings import Settings
from app.signing import DownloadSigner
from app.storage import ResultStore
from app.transitions import Transitions
from app.webhooks import Resolver, system_resolve


@dataclass
class ApiState:
    settings: Settings
    engine: AsyncEngine
    clock: Clock
    transitions: Transitions
    notifier: JobChangeNotifier
    feeds: FeedHub
    signer: DownloadSigner
    store: ResultStore
    metrics: ApiMetrics
    migration_heads: frozenset[str] = field(default_factory=frozenset)
    draining: bool = False
    resolve: Resolver = system_resolve
    """Host names -> addresses for the webhook URL check (off the event loop)."""
    keys: KeyCache = field(init=False)
    """Recent successful API-key lookups (``app.api.keycache``)."""
    reads: AutocommitConnections = field(init=False)
    """The same pool in autocommit, for reads that need no transaction (authentication,
    a status, a listing page) and a creation that is one statement: no
    ``BEGIN``/``ROLLBACK`` round trips around them."""

    def __post_init__(self) -> None:
        self.reads = AutocommitConnections(self.engine)
        self.keys = KeyCache(
            ttl_seconds=self.settings.api_key_cache_seconds,
            max_entries=self.settings.api_key_cache_size,
        )
