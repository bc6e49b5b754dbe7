"""Prometheus metrics of one API process (its own registry, so apps do not collide).

``/metrics`` serves this registry, the process-wide families of :mod:`atlas_jobs._app.metrics` and,
under ``atlas-jobs serve``, the worker processes' families (multiprocess mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from atlas_jobs._app.api.queue_sampler import QueueGauges


@dataclass
class ApiMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.requests = Counter(
            "atlas_http_requests_total",
            "HTTP requests answered, by route template and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "atlas_http_request_duration_seconds",
            "Time to answer an HTTP request (streams: time to the first byte).",
            ["method", "route"],
            registry=self.registry,
        )
        self.queue = QueueGauges()
        self.registry.register(self.queue)
        self.jobs_created = Counter(
            "atlas_jobs_created_total",
            "Jobs created through this process (replays of an Idempotency-Key excluded).",
            ["kind"],
            registry=self.registry,
        )
        # Its children by kind (``labels()`` validates and locks on every call); bounded
        # by the registered kinds: only a created job's kind is counted.
        self._created: dict[str, Any] = {}
        self.watchers = Gauge(
            "atlas_watchers",
            "Open long-polls (Prefer: wait) and event streams (sampled at scrape time).",
            registry=self.registry,
        )
        self.feeds = Gauge(
            "atlas_feeds",
            "Jobs with a live feed shared by their watchers (sampled at scrape time).",
            registry=self.registry,
        )
        self.listener_connected = Gauge(
            "atlas_listener_connected",
            "1 while the LISTEN connection for job changes is up.",
            registry=self.registry,
        )

    def count_created(self, kind: str) -> None:
        """One more job of ``kind`` created through this process."""
        child = self._created.get(kind)
        if child is None:
            child = self._created[kind] = self.jobs_created.labels(kind)
        child.inc()
