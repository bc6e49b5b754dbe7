"""What one API process holds for its lifetime (built in the app's lifespan)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.keycache import KeyCache
from atlas_jobs._app.api.metrics import ApiMetrics
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import AutocommitConnections
from atlas_jobs._app.services.creation import JobCreation
from atlas_jobs._app.services.feeds import FeedHub
from atlas_jobs._app.services.live_workers import LiveWorkers
from atlas_jobs._app.services.notifier import JobChangeNotifier
from atlas_jobs._app.services.pauses import PauseService
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.signing import DownloadSigner
from atlas_jobs._app.storage import ResultStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._app.webhooks import Resolver, system_resolve


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
    live_workers: LiveWorkers = field(default_factory=LiveWorkers)
    """The live worker processes per kind@version, refreshed in the background
    (``atlas_jobs._app.services.live_workers``)."""
    keys: KeyCache = field(init=False)
    """Recent successful API-key lookups (``atlas_jobs._app.api.keycache``)."""
    reads: AutocommitConnections = field(init=False)
    """The same pool in autocommit, for reads that need no transaction (authentication,
    a status, a listing page) and a creation that is one statement: no
    ``BEGIN``/``ROLLBACK`` round trips around them."""
    creation: JobCreation = field(init=False)
    """The creation service: it chooses between ``engine`` and ``reads`` itself."""

    def pauses(self) -> PauseService:
        """The kind pauses' service on this process's engine and view of the workers."""
        return PauseService(
            self.engine,
            self.clock,
            self.live_workers,
            live_window_seconds=self.settings.worker_live_window_seconds,
        )

    def __post_init__(self) -> None:
        self.reads = AutocommitConnections(self.engine)
        self.creation = JobCreation(self.engine, self.reads, self.transitions, self.settings)
        self.keys = KeyCache(
            ttl_seconds=self.settings.api_key_cache_seconds,
            max_entries=self.settings.api_key_cache_size,
        )
