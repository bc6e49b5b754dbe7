"""Prometheus families every process records (API and workers alike).

They live in one process-wide registry, :data:`REGISTRY`: the executor counts every
applied move here whatever process applied it, workers count their attempts. The API
process serves it beside its own per-app registry (:mod:`atlas_jobs._app.api.metrics`); a worker
serves it on ``--metrics-port``; under ``atlas-jobs serve`` the workers run in
prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) and the API adds
what they wrote to its ``/metrics`` (:func:`merged_exposition`).

Labels are bounded vocabularies only (transition and state names, kinds, error codes,
outcomes): never a job id, an owner or anything from a payload.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

REGISTRY = CollectorRegistry(auto_describe=True)

# Seconds from a fraction of a second to a day: queue waits and job lifetimes alike.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600, 14400, 86400)

TRANSITIONS = Counter(
    "atlas_transitions",
    "Moves applied by this process, by named transition and target state "
    "(rescue = lease rescues, expire_result = result expirations, "
    "cancel_too_late = cancels lost to publication).",
    ["transition", "to_state"],
    registry=REGISTRY,
)
JOB_DURATION = Histogram(
    "atlas_job_duration_seconds",
    "Create-to-finish time of jobs that reached a terminal state, by kind and state.",
    ["kind", "state"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
START_DELAY = Histogram(
    "atlas_job_start_delay_seconds",
    "Claim-to-start delay: from when a job became claimable to its claim, by kind.",
    ["kind"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
ATTEMPTS = Counter(
    "atlas_attempts",
    "Attempts ended by this worker process, by kind and outcome.",
    ["kind", "outcome"],
    registry=REGISTRY,
)
_ATTEMPT_COUNTERS: dict[tuple[str, str], Counter] = {}


def record_attempt(kind: str, outcome: str) -> None:
    """Count one ended attempt (``labels()`` runs once per kind and outcome, not per job)."""
    counter = _ATTEMPT_COUNTERS.get((kind, outcome))
    if counter is None:
        counter = _ATTEMPT_COUNTERS[kind, outcome] = ATTEMPTS.labels(kind, outcome)
    counter.inc()


RETRIES = Counter(
    "atlas_retries",
    "Recoverable errors that sent a job back to the queue or to unresolved, by kind and "
    "error code (the error class).",
    ["kind", "error_code", "outcome"],
    registry=REGISTRY,
)
EXTERNAL_OPERATIONS = Counter(
    "atlas_external_operations",
    "Outcomes of external operations recorded by this worker process, by destination "
    "(a configured name) and outcome: attempted, confirmed, awaiting_confirmation, "
    "refused, uncertain, not_sent, adopted, not_applied_found, undecided, unresolved.",
    ["destination", "outcome"],
    registry=REGISTRY,
)
SCHEDULE_FIRES = Counter(
    "atlas_schedule_fires",
    "Schedule ticks fired by this process's scheduler, by outcome: created (a job) or "
    "the refusal's reason (owner_at_capacity: the owner's admission cap refused it).",
    ["outcome"],
    registry=REGISTRY,
)
DB_POOL_IN_USE = Gauge(
    "atlas_db_pool_connections_in_use",
    "Pooled database connections checked out, by pool (sampled).",
    ["pool"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)
DB_POOL_WAITING = Gauge(
    "atlas_db_pool_waiting",
    "Tasks waiting for a pooled database connection, by pool (sampled).",
    ["pool"],
    multiprocess_mode="livesum",
    registry=REGISTRY,
)


def record_applied(rows: Iterable[tuple[str, Any]]) -> None:
    """Count applied moves: ``(transition name, returned row)`` pairs. A row that carries
    ``created_at`` and ``finished_at`` (a full row entering a terminal state) is also
    observed as a job lifetime."""
    # One counter increment per (transition, state) of the batch: ``labels()`` is the
    # costly part, and a group commit moves hundreds of jobs the same way.
    moved: collections.Counter[tuple[str, str]] = collections.Counter()
    durations: dict[tuple[str, str], Any] = {}
    for transition, row in rows:
        state = row.state
        moved[transition, state] += 1
        # Attribute reads (a row without the column answers None): most moves are not
        # terminal, and one read tells.
        finished_at = getattr(row, "finished_at", None)
        if finished_at is None:
            continue
        created_at = getattr(row, "created_at", None)
        kind = getattr(row, "kind", None)
        if created_at is None or kind is None:
            continue
        if getattr(row, "moved_from", None) != state:  # entering it, not a late cancel
            key = (kind, state)
            if key not in durations:
                durations[key] = JOB_DURATION.labels(*key)
            durations[key].observe(max(0.0, (finished_at - created_at).total_seconds()))
    for labels, count in moved.items():
        TRANSITIONS.labels(*labels).inc(count)


def record_claims(claims: Iterable[tuple[str, str, datetime, datetime]]) -> None:
    """Count claims and observe each job's claim-to-start delay, from ``(kind, state,
    claimed at, claimable since)`` of each claimed job (``updated_at`` and
    ``available_at``, both database time)."""
    claimed: collections.Counter[str] = collections.Counter()
    delays: dict[str, Any] = {}
    for kind, state, claimed_at, claimable_since in claims:
        claimed[state] += 1
        if kind not in delays:
            delays[kind] = START_DELAY.labels(kind)
        delays[kind].observe(max(0.0, (claimed_at - claimable_since).total_seconds()))
    for state, count in claimed.items():
        TRANSITIONS.labels("claim", state).inc(count)


def multiprocess_dir() -> str | None:
    """The directory of multiprocess-mode worker metrics, when this process serves them
    (the API under ``serve``) -- see :func:`merged_exposition`."""
    return os.environ.get("ATLAS_WORKER_METRICS_DIR") or None


class _Labelled(Collector):
    """Every sample of ``source`` with one more label (``process``), so families that
    the API and the workers both record stay distinguishable in one exposition."""

    def __init__(self, source: Collector, **labels: str) -> None:
        self.source = source
        self.labels = labels

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [
                Sample(s.name, {**s.labels, **self.labels}, s.value, s.timestamp, s.exemplar)
                for s in family.samples
            ]
            yield out


class _Merged(Collector):
    """Families of several collectors with the same name joined into one (a text
    exposition may carry each family once)."""

    def __init__(self, *sources: Collector) -> None:
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for source in self.sources:
            for family in source.collect():
                known = merged.get(family.name)
                if known is None:
                    merged[family.name] = family
                else:
                    known.samples.extend(family.samples)
        yield from merged.values()


def merged_exposition(*own: CollectorRegistry) -> bytes:
    """Prometheus text of this process's registries, plus (under ``serve``) what the
    worker processes wrote in multiprocess mode, labelled ``process="api"`` and
    ``process="workers"``."""
    path = multiprocess_dir()
    if path is None:
        registry = CollectorRegistry()
        registry.register(_Merged(*own))
        return generate_latest(registry)
    workers = CollectorRegistry()
    MultiProcessCollector(workers, path=path)  # type: ignore[no-untyped-call]
    registry = CollectorRegistry()
    registry.register(
        _Merged(*(_Labelled(r, process="api") for r in own), _Labelled(workers, process="workers"))
    )
    return generate_latest(registry)


def serve_worker_metrics(host: str, port: int) -> None:
    """``atlas-jobs worker --metrics-port``: this process's families over HTTP (a daemon
    thread), or every process's when it runs in multiprocess mode."""
    from prometheus_client import start_http_server

    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    start_http_server(port, addr=host, registry=registry)
