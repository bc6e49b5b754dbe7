"""Statements sent straight to the driver (asyncpg), past SQLAlchemy's execution layer.

On an autocommit connection (:func:`~atlas_jobs._app.db.engine.single_statements`,
:class:`~atlas_jobs._app.db.engine.AutocommitConnections`) a statement is its own
transaction, and the hot ones -- the worker's claim, a batched move (a group-committed
publication), a creation -- go to the driver: SQLAlchemy's execution (the execution
context, the greenlet hop, the result's rows) costs about 0.15 ms of client CPU per
statement and 9 µs per row on top of the driver's own work: a seventh of a claim of two
dozen jobs on the claim loop, whose latency bounds the drain, and a third of a one-job
creation's client time (docs/performance.md, "Figures behind the code"). The statement
is the text SQLAlchemy would send (compiled once for the asyncpg dialect); the rows are
asyncpg's records, read by position or, as SQLAlchemy's rows, by attribute
(:class:`DriverRow`). Inside a transaction SQLAlchemy has begun, the same call goes
through SQLAlchemy (:func:`rows`): a statement sent past it would not be part of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import asyncpg
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import TextualSelect

from atlas_jobs._app.db.outages import connection_gone


@dataclass(frozen=True, slots=True)
class DriverStatement:
    """A named-parameter statement as the driver takes it: positional ``$n`` text and
    the parameter names in their order."""

    sql: str
    names: tuple[str, ...]

    @classmethod
    def of(cls, statement: TextClause | TextualSelect) -> DriverStatement:
        compiled = statement.compile(dialect=asyncpg_dialect.dialect())  # type: ignore[no-untyped-call]
        return cls(compiled.string, tuple(compiled.positiontup or ()))


class DriverRow(asyncpg.Record):  # type: ignore[misc]
    """A driver record read as SQLAlchemy's rows are: by position and by attribute."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@cache
def sent(statement: TextClause | TextualSelect) -> DriverStatement:
    """``statement`` as the driver takes it, compiled once (statements are module
    constants: one entry each)."""
    return DriverStatement.of(statement)


def autocommit(conn: AsyncConnection) -> bool:
    """Whether ``conn`` runs each statement as its own transaction."""
    sync = conn.sync_connection
    return sync is not None and sync.get_execution_options().get("isolation_level") == (
        "AUTOCOMMIT"
    )


async def rows(
    conn: AsyncConnection, statement: TextClause | TextualSelect, params: Mapping[str, Any]
) -> Sequence[Any]:
    """The rows of ``statement`` (read by position or attribute): through the driver on
    an autocommit connection, through SQLAlchemy inside a transaction it has begun."""
    if autocommit(conn):
        return await _fetch(conn, sent(statement), params)
    return (await conn.execute(statement, params)).all()


async def fetch(
    conn: AsyncConnection, statement: TextClause | TextualSelect, params: Mapping[str, Any]
) -> Sequence[Any]:
    """The rows of ``statement`` (:class:`DriverRow`), always through the driver:
    ``conn`` must be in autocommit."""
    if not autocommit(conn):
        raise ValueError("driver statements run on autocommit connections only")
    return await _fetch(conn, sent(statement), params)


async def _fetch(
    conn: AsyncConnection, statement: DriverStatement, params: Mapping[str, Any]
) -> Sequence[Any]:
    """``statement`` sent on ``conn``'s driver connection. A failure that is not the
    server's answer (the connection broke), or an answer that says the connection is no
    use (:func:`disconnect`), invalidates ``conn``, so the pool never hands it out again."""
    driver: Any = (await conn.get_raw_connection()).driver_connection
    try:
        found: Sequence[Any] = await driver.fetch(
            statement.sql, *[params[name] for name in statement.names], record_class=DriverRow
        )
    except asyncpg.PostgresError as exc:
        if disconnect(exc):
            await conn.invalidate()
        raise
    except Exception as exc:
        lost = driver.is_closed()  # before invalidating, which closes it
        await conn.invalidate()
        if lost and not isinstance(exc, ConnectionError):
            raise ConnectionLostError(type(exc).__name__) from exc
        raise
    except BaseException:
        await conn.invalidate()
        raise
    return found


class ConnectionLostError(ConnectionError):
    """The driver's connection closed under a statement -- the server went away before
    or during it -- whatever the driver raised (``InterfaceError: connection is closed``
    when the server's goodbye arrived after the checkout's ping, before the statement):
    an outage, as SQLAlchemy's asyncpg dialect decides (``is_disconnect``: the connection
    is closed after the error). The driver's error is its ``__cause__``."""


def disconnect(exc: asyncpg.PostgresError) -> bool:
    """Whether the server's answer means this connection is no use any more, as the
    engine's ``handle_error`` listener decides for SQLAlchemy's executions
    (:func:`~atlas_jobs._app.db.engine.create_engine`): a connection exception (class
    08), the server shutting down or not yet up (57P01-57P03), or a server that no
    longer takes writes (25006: demoted to a standby)."""
    return connection_gone(str(getattr(exc, "sqlstate", "") or ""))
