""":class:`atlas_jobs._app.db.engine.AutocommitConnections`: a checkout of the engine's pool runs each
statement as its own transaction, and the connection goes back to the pool transactional,
so the next ``engine.begin()`` on it is one transaction again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy.ext.asyncio.engine as sqlalchemy_async
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.engine import AutocommitConnections, create_engine

XID = text("SELECT pg_current_xact_id()::text")


async def _two_xids(conn: AsyncConnection) -> tuple[str, str]:
    first = (await conn.execute(XID)).scalar_one()
    second = (await conn.execute(XID)).scalar_one()
    return first, second


async def test_autocommit_checkouts_and_transactions_share_one_connection(
    database_url: str,
) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    connections = AutocommitConnections(engine)
    try:
        async with connections.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            first, second = await _two_xids(conn)
            assert first != second  # each statement its own transaction
        async with connections.begin() as conn:  # begin(): still no transaction
            first, second = await _two_xids(conn)
            assert first != second
        async with engine.begin() as conn:  # the same pooled connection, reset
            assert (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one() == pid
            first, second = await _two_xids(conn)
            assert first == second  # one transaction
        async with engine.connect() as conn:
            assert (await conn.get_isolation_level()) == "READ COMMITTED"
    finally:
        await engine.dispose()


async def test_autocommit_checkouts_take_no_greenlet_beyond_their_statements(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each hop of the async API into SQLAlchemy's sync layer runs in a greenlet of its
    own (a frame stack mapped and unmapped, and its switches). A checkout, two
    statements and the return are four; switching the checkout to autocommit and
    ``begin()`` (nothing to begin or commit in autocommit) add none."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    connections = AutocommitConnections(engine)
    spawned: list[str] = []
    original = sqlalchemy_async.greenlet_spawn

    async def counting(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        spawned.append(getattr(fn, "__name__", repr(fn)))
        return await original(fn, *args, **kwargs)

    try:
        async with engine.connect() as conn:  # the pool holds its connection from here
            await conn.execute(text("SELECT 1"))
        monkeypatch.setattr(sqlalchemy_async, "greenlet_spawn", counting)
        for opened in (connections.connect, connections.begin):
            spawned.clear()
            async with opened() as conn:
                first, second = await _two_xids(conn)
                assert first != second  # autocommit: each statement its own transaction
            assert len(spawned) == 4, spawned  # checkout, two statements, return
    finally:
        monkeypatch.undo()
        await engine.dispose()
