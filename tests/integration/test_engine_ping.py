"""The pre-ping of :func:`atlas_jobs._app.db.engine.create_engine`: one round trip per checkout, and
a pooled connection the server dropped is replaced before anyone uses it."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event, text

from atlas_jobs._app.db.engine import create_engine


async def test_the_checkout_ping_is_one_round_trip(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    queries: list[str] = []
    try:
        async with engine.connect() as conn:  # the pool's one connection, now pooled
            raw = await conn.get_raw_connection()
            raw.driver_connection.add_query_logger(lambda r: queries.append(r.query))  # type: ignore[union-attr]
        async with engine.connect() as conn:  # checkout: the ping runs here
            await asyncio.sleep(0)  # asyncpg calls query loggers with call_soon
            assert queries == [";"]  # not BEGIN; ; ROLLBACK (SQLAlchemy's asyncpg ping)
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()


async def test_a_connection_the_server_dropped_is_replaced_at_checkout(
    database_url: str,
) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0)
    admin = create_engine(database_url, pool_size=1, max_overflow=0)
    connects: list[Any] = []
    event.listen(engine.sync_engine, "connect", lambda *args: connects.append(args))
    try:
        async with engine.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        async with admin.connect() as other:
            assert (
                await other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            ).scalar_one()
        async with engine.connect() as conn:  # the dead one fails its ping; a new one
            new_pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
        assert new_pid != pid
        assert len(connects) == 2
    finally:
        await engine.dispose()
        await admin.dispose()
