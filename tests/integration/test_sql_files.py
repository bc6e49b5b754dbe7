"""The committed ``.sql`` files against a database migrated to head.

``app/db/sql/transitions.sql`` (generated, see tests/unit/test_transitions_sql.py): every
block, read back from the file, is prepared by PostgreSQL -- parsed and analysed
against the schema (every table, column, function and parameter type resolved) -- so a
rendering that is not executable SQL fails here.

``app/db/sql/functions.sql`` (written by hand): every function and trigger of the schema
as the head migration leaves it. The catalog's own text (``pg_get_functiondef``,
``pg_get_triggerdef``) is compared with the file's, whitespace-insensitively, one by one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.db.render_sql import Block, blocks
from tests.support import REPO

SQL = REPO / "app" / "db" / "sql"
FUNCTIONS = """
SELECT p.proname::text AS name, pg_get_functiondef(p.oid) AS definition
  FROM pg_proc AS p
 WHERE p.pronamespace = 'public'::regnamespace
"""
TRIGGERS = """
SELECT t.tgname::text AS name, pg_get_triggerdef(t.oid) AS definition
  FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
 WHERE c.relnamespace = 'public'::regnamespace AND NOT t.tgisinternal
"""


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


# -- functions.sql ---------------------------------------------------------------------


def normalized(definition: str) -> str:
    """A definition with each run of whitespace as one space (layout is not meaning)."""
    return re.sub(r"\s+", " ", definition).strip()


def declared() -> dict[str, str]:
    """functions.sql's blocks by name: ``CREATE OR REPLACE FUNCTION`` or ``CREATE TRIGGER``."""
    found = blocks((SQL / "functions.sql").read_text())
    assert len({block.name for block in found}) == len(found), "a name is used twice"
    for block in found:
        assert re.match(r"CREATE (OR REPLACE FUNCTION|TRIGGER) ", block.sql), block.name
    return {block.name: block.sql for block in found}


async def catalog(conn: asyncpg.Connection) -> dict[str, str]:
    """Every function of the public schema and every trigger on its tables, by name (a
    function overloaded, or named like a trigger, would need a finer key: refused)."""
    rows = [*(await conn.fetch(FUNCTIONS)), *(await conn.fetch(TRIGGERS))]
    found = {row["name"]: row["definition"] for row in rows}
    assert len(found) == len(rows), "two functions or triggers share a name"
    return found


def drift(file: Mapping[str, str], database: Mapping[str, str]) -> list[str]:
    """One line per function or trigger that differs: where the texts first part, or
    which side it is missing from."""
    problems = []
    for name in sorted(file.keys() | database.keys()):
        if name not in database:
            problems.append(f"{name}: in functions.sql, not in the migrated database")
        elif name not in file:
            problems.append(f"{name}: in the migrated database, not in functions.sql")
        elif normalized(file[name]) != normalized(database[name]):
            ours, theirs = normalized(file[name]).split(" "), normalized(database[name]).split(" ")
            at = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b),
                min(len(ours), len(theirs)),
            )
            start = max(at - 6, 0)
            problems.append(
                f"{name} differs at word {at}: functions.sql has "
                f"{' '.join(ours[start : at + 6])!r}, the database "
                f"{' '.join(theirs[start : at + 6])!r}"
            )
    return problems


FIX = (
    "app/db/sql/functions.sql and the head migration disagree; edit the file, and write a "
    "new alembic revision applying it (see the file's header):\n"
)


async def test_functions_sql_is_every_function_and_trigger_of_the_migrated_schema(
    conn: asyncpg.Connection,
) -> None:
    problems = drift(declared(), await catalog(conn))
    assert not problems, FIX + "\n".join(problems)


async def test_functions_sql_applied_to_a_migrated_database_changes_nothing(
    conn: asyncpg.Connection,
) -> None:
    """The file is SQL a revision can apply: each function replaced, each trigger dropped
    and created again, and the catalog still says the same (but for layout)."""
    before = await catalog(conn)
    async with conn.transaction():
        for name, sql in declared().items():
            if sql.startswith("CREATE TRIGGER"):
                table = re.search(r" ON (\S+)", sql)
                assert table is not None
                await conn.execute(f"DROP TRIGGER {name} ON {table.group(1)}")
            await conn.execute(sql)
    after = await catalog(conn)
    assert after.keys() == before.keys()
    assert {n: normalized(d) for n, d in after.items()} == {
        n: normalized(d) for n, d in before.items()
    }


async def test_the_comparison_names_what_drifted(conn: asyncpg.Connection) -> None:
    """A function changed, one added and a trigger dropped are each reported by name."""
    await conn.execute("""
CREATE OR REPLACE FUNCTION atlas_backlog_jobs_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM owner_backlog WHERE true;
    RETURN NULL;
END
$$;
CREATE FUNCTION atlas_stray() RETURNS integer LANGUAGE sql AS $$ SELECT 1 $$;
DROP TRIGGER jobs_inserted ON jobs;
""")
    problems = drift(declared(), await catalog(conn))
    assert [problem.split(" ")[0].rstrip(":") for problem in problems] == [
        "atlas_backlog_jobs_truncated",
        "atlas_stray",
        "jobs_inserted",
    ]
    assert "DELETE FROM owner_backlog;" in problems[0]
    assert "WHERE true;" in problems[0]
