"""Shared test helpers: the database under test, alembic, and a job factory."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

from atlas_jobs._app.db.engine import libpq_url, normalize_url
from harness import processes
from harness.processes import free_port as free_port  # re-exported for the tests
from harness.processes import stop_process_group

REPO = Path(__file__).resolve().parent.parent


def alembic_config(url: str) -> Config:
    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("script_location", str(REPO / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


async def alembic(url: str, verb: str, *args: Any) -> None:
    """Run an alembic command in a worker thread (env.py runs its own event loop)."""
    await asyncio.to_thread(getattr(command, verb), alembic_config(url), *args)


def with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


@dataclass
class Server:
    """The PostgreSQL server the suite runs against (embedded unless DATABASE_URL)."""

    admin_url: str  # SQLAlchemy URL of a maintenance database
    embedded_data_dir: Path | None = None  # set when this suite runs the embedded server

    def restart(self) -> None:
        """Restart the embedded server in place (same port): every connection drops."""
        if self.embedded_data_dir is None:
            raise RuntimeError("only the embedded server can be restarted by the tests")
        from atlas_jobs._app.db import embedded

        embedded.restart(self.embedded_data_dir)

    async def execute(self, sql: str) -> None:
        conn = await asyncpg.connect(libpq_url(self.admin_url))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def create_database(self, name: str, template: str | None = None) -> str:
        clause = f' TEMPLATE "{template}"' if template else ""
        await self.execute(f'CREATE DATABASE "{name}"{clause}')
        return with_database(self.admin_url, name)

    async def drop_database(self, name: str) -> None:
        await self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @asynccontextmanager
    async def scratch_database(self, template: str | None = None) -> AsyncIterator[str]:
        name = f"t_{uuid.uuid4().hex[:12]}"
        url = await self.create_database(name, template)
        try:
            yield url
        finally:
            await self.drop_database(name)


def server_from_environment(data_dir: Path, *, max_connections: int = 300) -> tuple[Server, bool]:
    """The server to test against, and whether this run started it."""
    explicit = os.environ.get("DATABASE_URL")
    if explicit:
        return Server(with_database(normalize_url(explicit), "postgres")), False
    from atlas_jobs._app.db import embedded

    pgdata = data_dir / "pg"
    already = (pgdata / "postmaster.pid").exists()
    server = embedded.ensure_running(data_dir, max_connections=max_connections)
    return Server(server.url("postgres"), embedded_data_dir=data_dir), not already


@contextmanager
def atlas_process(
    args: list[str], *, env: dict[str, str], log_path: Path, ready_url: str, timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m atlas_jobs._app.cli ARGS`` in its own session, until ``ready_url`` answers 200.

    At exit the whole process group gets SIGTERM (then SIGKILL after 10 s), so a test
    leaves nothing behind whatever happened."""
    process = processes.spawn(["-m", processes.CLI, *args], env=env, log_path=log_path)
    try:
        processes.wait_ready(process, ready_url, log_path, timeout=timeout, name=str(args))
        yield process
    finally:
        stop_process_group(process)
