"""Readiness: the database reachable and its migrations current, checked within a
bound."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.migrations import SchemaState, schema_status


async def database_checks(engine: AsyncEngine, *, within_seconds: float) -> dict[str, str]:
    """``database`` (``ok`` or why not) and ``migrations`` (``ok``, the schema's state,
    or ``unknown`` when the database could not be asked within ``within_seconds``)."""
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(within_seconds), engine.connect() as conn:
            schema = await schema_status(conn)
        checks["database"] = "ok"
        checks["migrations"] = "ok" if schema.state == SchemaState.CURRENT else schema.state.value
    except Exception as exc:  # unreachable, timed out, or not migrated at all
        checks["database"] = f"unavailable: {type(exc).__name__}"
        checks["migrations"] = "unknown"
    return checks


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the process should be sent traffic, and each check's answer."""

    ready: bool
    checks: dict[str, str]


async def readiness(engine: AsyncEngine, *, draining: bool, within_seconds: float) -> Readiness:
    """Ready when the database answers, its migrations are current and the process is
    not draining (shutting down: its load balancer should stop sending it requests)."""
    checks = await database_checks(engine, within_seconds=within_seconds)
    checks["draining"] = "yes" if draining else "no"
    ready = checks["database"] == "ok" and checks["migrations"] == "ok" and not draining
    return Readiness(ready, checks)
