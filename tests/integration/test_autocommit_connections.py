""":class:`app.db.engine.AutocommitConnections`: a checkout of the engine's pool runs each
statement as its own transaction, and the connection goes back to the pool transactional,
so the next ``engine.begin()`` on it is one transaction again."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.engine import AutocommitConnections, create_engine

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
