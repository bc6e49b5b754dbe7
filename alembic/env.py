"""Alembic environment (async). The URL comes from ``sqlalchemy.url`` when a caller set
it (the tests, ``atlas-jobs migrate``) or else from DATABASE_URL / the embedded server."""

from __future__ import annotations

import asyncio
import sys
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from atlas_jobs._app.db.engine import resolve_database_url
from atlas_jobs._app.db.migrations import (
    MIGRATION_LOCK_POLL_SECONDS,
    MIGRATION_LOCK_TRY,
    MIGRATION_UNLOCK,
    MIGRATION_WAITING,
)
from atlas_jobs._app.db.schema import metadata
from atlas_jobs._app.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or resolve_database_url(Settings())


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        compare_server_default=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_sync(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_server_default=True,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    engine = create_async_engine(_url(), hide_parameters=True)
    try:
        async with engine.connect() as connection:
            # One migration at a time (atlas_jobs._app.db.migrations.MIGRATION_LOCK_TRY): alembic reads
            # the current revision only once the lock is held, so a run that waited for
            # another finds the schema that one left. The lock is the session's: it
            # outlives the transactions below.
            waited = False
            while not await connection.scalar(MIGRATION_LOCK_TRY):
                await connection.commit()  # no snapshot held between tries
                if not waited:
                    print(MIGRATION_WAITING, file=sys.stderr, flush=True)
                    waited = True
                await asyncio.sleep(MIGRATION_LOCK_POLL_SECONDS)
            await connection.commit()
            await connection.run_sync(_run_sync)
            await connection.commit()
            await connection.execute(MIGRATION_UNLOCK)
            await connection.commit()
    finally:
        # Closes the connection: the lock of a run that failed half way ends with it.
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
