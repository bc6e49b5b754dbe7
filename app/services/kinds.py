"""``GET /v1/kinds``: the kinds the API accepts beside what the live workers serve.

From the kind registry (``KINDS``: name, the version new jobs get, the versions declared
compatible, the description and the input model) and this process's view of the live
workers (:mod:`atlas_jobs._app.services.live_workers`: live worker processes per
``kind@version``). A version only workers name -- a fleet deployed before the API knows
its version, or a kind the API does not accept at all -- is listed too, with
``accepted`` false, so an operator sees it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.kinds import KINDS, handler_key
from atlas_jobs._app.kinds.registry import KindSpec
from atlas_jobs._app.services.live_workers import LiveWorkers, refresh_once
from atlas_jobs._app.services.schemas import (
    ConcurrencyPublic,
    KindPublic,
    KindsPublic,
    KindVersionPublic,
    RateSet,
)

_SCHEMAS: dict[type[BaseModel], dict[str, Any]] = {}


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The input model's JSON Schema, generated once per model."""
    schema = _SCHEMAS.get(model)
    if schema is None:
        schema = _SCHEMAS[model] = model.model_json_schema()
    return schema


def parse_key(key: str) -> tuple[str, int] | None:
    """``"kind@version"`` -> (kind, version); ``None`` for a key of another shape."""
    kind, at, version = key.rpartition("@")
    if not at or not kind or not version.isdigit():
        return None
    return kind, int(version)


def kinds_public(live: Mapping[str, int]) -> KindsPublic:
    """Every accepted kind with its versions and their live workers, and every kind or
    version only live workers serve; by name, versions oldest first."""
    served: dict[str, set[int]] = defaultdict(set)
    for key, count in live.items():
        parsed = parse_key(key)
        if parsed is not None and count > 0:
            served[parsed[0]].add(parsed[1])
    found: list[KindPublic] = []
    for spec in KINDS.values():
        accepted = {spec.version, *spec.compatible_versions}
        found.append(
            KindPublic(
                name=spec.name,
                version=spec.version,
                description=spec.summary,
                input_schema=input_schema(spec.input_model),
                versions=_versions(spec.name, accepted, served.get(spec.name, set()), live),
                concurrency=concurrency_public(spec),
            )
        )
    for name in sorted(set(served) - {spec.name for spec in KINDS.values()}):
        found.append(
            KindPublic(
                name=name,
                version=None,
                description=None,
                input_schema=None,
                versions=_versions(name, set(), served[name], live),
            )
        )
    return KindsPublic(kinds=sorted(found, key=lambda kind: kind.name))


def concurrency_public(spec: KindSpec) -> ConcurrencyPublic | None:
    """What ``GET /v1/kinds`` says of the kind's concurrency declaration."""
    if spec.concurrency_key is None:
        return None
    rate = (
        None
        if spec.concurrency_rate is None or spec.concurrency_period_seconds is None
        else RateSet(starts=spec.concurrency_rate, per_seconds=spec.concurrency_period_seconds)
    )
    return ConcurrencyPublic(
        key=spec.concurrency_key,
        limit=spec.concurrency_limit,
        rate=rate,
        per_job=spec.concurrency_per_job,
    )


def _versions(
    name: str, accepted: set[int], served: set[int], live: Mapping[str, int]
) -> list[KindVersionPublic]:
    return [
        KindVersionPublic(
            version=version,
            accepted=version in accepted,
            live_workers=live.get(handler_key(name, version), 0),
        )
        for version in sorted(accepted | served)
    ]


async def kinds_view(
    engine: AsyncEngine, clock: Clock, live: LiveWorkers, *, window_seconds: float
) -> KindsPublic:
    """Every kind with its live workers per version, reading the worker registry first
    when this process has no view of it yet."""
    if live.counts is None:  # the first background read has not answered yet
        await refresh_once(engine, clock, live, window_seconds=window_seconds)
    assert live.counts is not None
    return kinds_public(live.counts)
