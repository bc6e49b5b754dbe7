"""The committed ``.sql`` files against a database migrated to head.

``app/db/sql/transitions.sql`` (generated, see tests/unit/test_transitions_sql.py): every
block, read back from the file, is prepared by PostgreSQL -- parsed and analysed
against the schema (every table, column, function and parameter type resolved) -- so a
rendering that is not executable SQL fails here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.db.render_sql import Block, blocks
from tests.support import REPO

SQL = REPO / "app" / "db" / "sql"


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(libpq_url(database_url))
    try:
        yield connection
    finally:
        await connection.close()


async def prepare_errors(conn: asyncpg.Connection, found: list[Block]) -> dict[str, str]:
    """Each block that PostgreSQL refuses to prepare, with its error. The ``:name``
    parameters become ``$n`` as SQLAlchemy's asyncpg dialect turns them when the code
    runs the statement."""
    errors: dict[str, str] = {}
    dialect = asyncpg_dialect.dialect()
    for block in found:
        compiled = str(text(block.sql).compile(dialect=dialect))
        try:
            await conn.prepare(compiled)
        except asyncpg.PostgresError as error:
            errors[block.name] = f"{type(error).__name__}: {error}"
    return errors


async def test_every_rendered_statement_is_prepared_by_postgresql(
    conn: asyncpg.Connection,
) -> None:
    found = blocks((SQL / "transitions.sql").read_text())
    assert len(found) > 50
    assert await prepare_errors(conn, found) == {}
    # ... and the check can fail: a rendering that is not SQL, one that names a column
    # or a function the schema lacks.
    broken = [
        Block("not_sql", "", "UPDATE jobs SET WHERE id = :id"),
        Block("no_column", "", "SELECT no_such_column FROM jobs WHERE id = :id"),
        Block("no_function", "", "SELECT atlas_no_such_function(CAST(:id AS uuid))"),
    ]
    assert set(await prepare_errors(conn, broken)) == {"not_sql", "no_column", "no_function"}
