"""The migrations this installation ships, and how a database's schema compares.

The alembic scripts live in the top-level ``alembic/`` folder of a checkout; a wheel
carries them inside the package as ``app/migrations`` (copied there at build time by
``setup.py``). :func:`script_location` finds whichever this installation has, so
``atlas-jobs migrate``, ``/readyz`` and the start-up check compare the database with
the *installed* code, not with a checkout that may not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from pathlib import Path

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection

import atlas_jobs._app as app
# One migration at a time per database: every run of alembic's env.py (``atlas-jobs
# migrate``, the tests, the benchmarks) holds this session-level advisory lock while it
# migrates, so a second run started meanwhile -- two replicas each migrating on deploy --
# waits, then finds the schema at head and does nothing, instead of racing the first
# over the same DDL and failing half way. It waits by TRYING every
# MIGRATION_LOCK_POLL_SECONDS, never inside a statement: a session blocked in
# ``pg_advisory_lock`` holds a snapshot, and a ``CREATE INDEX CONCURRENTLY`` of the
# running migration waits for every older snapshot -- a deadlock.
MIGRATION_LOCK_TRY = text("SELECT pg_try_advisory_lock(hashtextextended('atlas.migrate', 0))")
MIGRATION_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended('atlas.migrate', 0))")
MIGRATION_LOCK_POLL_SECONDS = 0.5
MIGRATION_WAITING = "another migration of this database is running; waiting for it to end"

PACKAGED = Path(app.__file__).resolve().parent / "migrations"
CHECKOUT = Path(app.__file__).resolve().parent.parent / "alembic"


class MigrationsMissingError(RuntimeError):
    """Neither the packaged nor the checkout's migrations were found."""


def script_location() -> Path:
    for candidate in (PACKAGED, CHECKOUT):
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationsMissingError(f"no migrations in {PACKAGED} or {CHECKOUT}")


def alembic_config(url: str) -> Config:
    """An alembic configuration without ``alembic.ini`` (a wheel has none)."""
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


@lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    return ScriptDirectory.from_config(config)


def heads() -> frozenset[str]:
    """The revisions the installed code expects (alembic heads)."""
    return frozenset(_scripts().get_heads())


class SchemaState(StrEnum):
    CURRENT = "current"  # at the installed heads
    UNMIGRATED = "unmigrated"  # no alembic_version table, or an empty one
    BEHIND = "behind"  # an older revision this installation knows: migrate
    UNKNOWN = "unknown"  # a revision this installation does not know (newer code ran)


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    state: SchemaState
    found: frozenset[str]
    expected: frozenset[str]

    def problem(self) -> str | None:
        """One line for an operator, or None when the schema is current."""
        expected = ", ".join(sorted(self.expected))
        found = ", ".join(sorted(self.found)) or "none"
        if self.state == SchemaState.CURRENT:
            return None
        if self.state == SchemaState.UNMIGRATED:
            return "the database is not migrated: run `atlas-jobs migrate`"
        if self.state == SchemaState.BEHIND:
            return (
                f"the database schema is older ({found}) than this version needs "
                f"({expected}): run `atlas-jobs migrate`"
            )
        return (
            f"the database schema ({found}) is unknown to this version (expects {expected}): "
            "a newer Atlas Jobs migrated it; run that version or upgrade this one"
        )


async def schema_status(conn: AsyncConnection) -> SchemaStatus:
    expected = heads()
    try:
        rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
        found = frozenset(str(row[0]) for row in rows)
    except ProgrammingError:  # undefined table
        await conn.rollback()
        return SchemaStatus(SchemaState.UNMIGRATED, frozenset(), expected)
    if not found:
        return SchemaStatus(SchemaState.UNMIGRATED, found, expected)
    if found == expected:
        return SchemaStatus(SchemaState.CURRENT, found, expected)
    try:
        for revision in found:
            _scripts().get_revision(revision)
    except CommandError:
        return SchemaStatus(SchemaState.UNKNOWN, found, expected)
    return SchemaStatus(SchemaState.BEHIND, found, expected)
