"""Statements sent straight to the driver (asyncpg), past SQLAlchemy's execution layer.

Only the worker's claim goes this way. The claim loop sends it back to back, and with
a bounded number of jobs held per process its latency bounds the drain: SQLAlchemy's
execution (the execution context, the greenlet hop, the result's rows) costs about
0.15 ms of client CPU per statement and 9 µs per row on top of the driver's own work,
a seventh of a claim of two dozen jobs (docs/performance.md, "Figures behind the code").
The statement is the same text SQLAlchemy would send (compiled once for the asyncpg
dialect), the rows asyncpg's records, read by position.

Only on a connection in autocommit (:func:`~atlas_jobs._app.db.engine.single_statements`):
a statement sent here is its own transaction, outside any SQLAlchemy tracks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import TextualSelect


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


async def fetch(
    conn: AsyncConnection, statement: DriverStatement, params: Mapping[str, Any]
) -> Sequence[Any]:
    """The rows of ``statement`` (asyncpg records, read by position), sent on ``conn``'s
    driver connection. A failure that is not the server's answer (the connection broke)
    invalidates ``conn``, so the pool never hands it out again."""
    sync = conn.sync_connection
    if sync is None or sync.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
        raise ValueError("driver statements run on autocommit connections only")
    driver: Any = (await conn.get_raw_connection()).driver_connection
    try:
        rows: Sequence[Any] = await driver.fetch(
            statement.sql, *[params[name] for name in statement.names]
        )
    except asyncpg.PostgresError:
        raise
    except BaseException:
        await conn.invalidate()
        raise
    return rows
