"""The operators' scheduling settings: per-owner shares of the fair share and per-key
concurrency limits and start rates. Each change is one transaction that records its
actor (``scheduling_changes``) and applies from the next claim."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db import scheduling_settings
from atlas_jobs._app.db.scheduling_settings import KeySetting
from atlas_jobs._app.transitions import Actor

__all__ = ["KeySetting", "changes", "in_force", "set_key", "set_share"]


async def in_force(engine: AsyncEngine) -> tuple[list[Row[Any]], list[Row[Any]]]:
    """The shares and the keys in force, read together."""
    async with engine.connect() as conn:
        return await scheduling_settings.shares(conn), await scheduling_settings.keys(conn)


async def set_share(
    engine: AsyncEngine, owner: str, share: int, *, actor: Actor, note: str | None
) -> Row[Any]:
    async with engine.begin() as conn:
        return await scheduling_settings.set_share(conn, owner, share, actor=str(actor), note=note)


async def set_key(
    engine: AsyncEngine, key: str, setting: KeySetting, *, actor: Actor, note: str | None
) -> Row[Any]:
    async with engine.begin() as conn:
        return await scheduling_settings.set_key(conn, key, setting, actor=str(actor), note=note)


async def changes(engine: AsyncEngine) -> list[Row[Any]]:
    """The operators' changes, newest first."""
    async with engine.connect() as conn:
        return await scheduling_settings.changes(conn)
