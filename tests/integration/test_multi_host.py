"""A multi-host ``DATABASE_URL`` against the real PostgreSQL: the pool and the LISTEN
connection skip a host that refuses connections, "no host takes writes" is an outage
(503), and a pooled connection on a server that turned read-only is discarded, so the
next checkout connects again (where a failover's new primary is found).

The failover itself -- a pg_auto_failover formation whose primary is killed under load
-- is ``tests/ha/test_failover.py``."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from atlas_jobs._app.db import driver
from atlas_jobs._app.db.engine import create_engine, libpq_url, normalize_url, single_statements
from atlas_jobs._app.db.listen import Listener
from atlas_jobs._app.db.outages import database_unavailable
from tests.support import free_port


def _with_a_dead_host_first(database_url: str, attrs: str) -> str:
    parsed = make_url(database_url)
    user = parsed.render_as_string(hide_password=False).split("://", 1)[1].split("@", 1)[0]
    hosts = f"127.0.0.1:{free_port()},{parsed.host}:{parsed.port}"
    return normalize_url(
        f"postgresql://{user}@{hosts}/{parsed.database}?target_session_attrs={attrs}"
    )


async def test_the_pool_and_the_listener_skip_a_host_that_refuses(database_url: str) -> None:
    url = _with_a_dead_host_first(database_url, "read-write")
    engine = create_engine(url, pool_size=1)
    try:
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT pg_is_in_recovery()"))).scalar_one() is False
    finally:
        await engine.dispose()

    connected = asyncio.Event()
    listener = Listener(
        libpq_url(url),
        "atlas_multi_host",
        on_payload=lambda _payload: None,
        on_connected=connected.set,
        application_name="atlas-test-multi-host",
    )
    listener.start()
    try:
        assert await listener.wait_connected(20)
    finally:
        await listener.stop()


async def test_no_host_matching_target_session_attrs_is_an_outage(database_url: str) -> None:
    # The only live host is a primary; asking for a standby finds none -- as a client
    # asking for read-write finds none while a failover holds every node read-only.
    # asyncpg raises the last host's error if one failed to connect, else its own.
    parsed = make_url(database_url)
    alone = normalize_url(
        parsed.update_query_dict({"target_session_attrs": "standby"}).render_as_string(
            hide_password=False
        )
    )
    for url, expected in [
        (alone, DBAPIError),  # wrapping asyncpg's TargetServerAttributeNotMatched
        (_with_a_dead_host_first(database_url, "standby"), ConnectionRefusedError),
    ]:
        engine = create_engine(url, pool_size=1)
        try:
            with pytest.raises(expected) as raised:
                async with engine.connect():
                    pass
            assert database_unavailable(raised.value)  # the API answers 503, not 500
        finally:
            await engine.dispose()


async def test_a_connection_on_a_read_only_server_is_discarded(database_url: str) -> None:
    engine = create_engine(database_url, pool_size=1, max_overflow=0, pre_ping=False)
    try:
        async with engine.connect() as conn:
            before = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            # What a demoted primary (or pg_auto_failover's stop_replication) looks like
            # from a session: every new transaction is read-only.
            await conn.execute(text("SET default_transaction_read_only = on"))
            await conn.commit()
            with pytest.raises(DBAPIError) as refused:
                await conn.execute(text("CREATE TABLE must_not_exist (id int)"))
        assert refused.value.connection_invalidated
        assert database_unavailable(refused.value)  # the API answers 503, not 500

        async with engine.begin() as conn:  # a fresh connection: writes work again
            after = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            await conn.execute(text("CREATE TEMPORARY TABLE writes_work (id int)"))
        assert after != before
    finally:
        await engine.dispose()


async def test_a_statement_sent_to_the_driver_on_a_read_only_server_discards_its_connection(
    database_url: str,
) -> None:
    """The same for a statement sent past SQLAlchemy (a claim, a creation or a batched
    move on an autocommit connection): the connection is invalidated, the error is an
    outage, and the next checkout connects again."""
    engine = single_statements(
        create_engine(database_url, pool_size=1, max_overflow=0, pre_ping=False)
    )
    try:
        async with engine.connect() as conn:
            before = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            await conn.execute(text("SET default_transaction_read_only = on"))
            with pytest.raises(asyncpg.PostgresError) as refused:
                await driver.fetch(conn, WRITE, {})
            assert conn.invalidated
        assert database_unavailable(refused.value)  # the API answers 503, not 500

        async with engine.connect() as conn:  # a fresh connection: writes work again
            after = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            rows = await driver.fetch(conn, WRITE, {})
        assert after != before
        assert list(rows) == []
    finally:
        await engine.dispose()


async def test_a_statement_sent_to_the_driver_on_a_connection_closed_under_it_is_an_outage(
    database_url: str,
) -> None:
    """The server goes away after the checkout's ping and before the statement (a
    primary killed mid-failover): the driver refuses to send on the closed connection;
    that is an outage (503), not a bug (500), and the pool never hands the connection
    out again."""
    engine = single_statements(create_engine(database_url, pool_size=1, max_overflow=0))
    try:
        async with engine.connect() as conn:
            dropped = (await conn.get_raw_connection()).driver_connection
            assert dropped is not None
            dropped.terminate()  # as asyncpg sees a connection the server dropped
            with pytest.raises(ConnectionError) as closed:
                await driver.fetch(conn, WRITE, {})
            assert conn.invalidated
        assert database_unavailable(closed.value)

        async with engine.connect() as conn:
            assert list(await driver.fetch(conn, WRITE, {})) == []
    finally:
        await engine.dispose()


WRITE = text("UPDATE jobs SET version = version WHERE false RETURNING id")
"""A write (refused on a read-only server whatever it matches) that changes nothing."""


async def test_a_bad_parameter_sent_to_the_driver_is_a_bug_not_an_outage(database_url: str) -> None:
    """A parameter the driver cannot encode is refused on a connection still good: a
    bug (500), never read as an outage, and the connection is kept."""
    engine = single_statements(create_engine(database_url, pool_size=1, max_overflow=0))
    try:
        async with engine.connect() as conn:
            with pytest.raises(asyncpg.DataError) as refused:
                await driver.fetch(conn, text("SELECT CAST(:n AS integer)"), {"n": "not a number"})
            assert not conn.invalidated
            assert list(await driver.fetch(conn, text("SELECT 1 AS one"), {})) == [(1,)]
        assert not database_unavailable(refused.value)
    finally:
        await engine.dispose()
