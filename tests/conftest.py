"""Fixtures: a real PostgreSQL (embedded unless DATABASE_URL is set), a migrated
template database, and a fresh database per test cloned from it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.transitions import Transitions
from tests.factory import JobFactory
from tests.objectstore import ObjectServer, moto_server
from tests.support import REPO, Server, alembic, server_from_environment

TEST_DATA_DIR = Path(os.environ.get("ATLAS_TEST_DATA_DIR", REPO / ".atlas" / "test"))

# Every API process a test starts inherits this: on SIGTERM it would otherwise keep
# answering (readiness 503) for 3 s before closing -- for a load balancer, not for a
# test's teardown (about 40 API processes a run). tests/ops/test_graceful_shutdown.py
# sets its own drain time to test exactly that.
os.environ.setdefault("ATLAS_SHUTDOWN_DRAIN_SECONDS", "0")

# Parallel workers each run API and worker processes with their own pools.
TEST_MAX_CONNECTIONS = 600
_STARTED_HERE = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (``make test`` runs ``-n``), the controller starts the embedded
    server before any worker exists, so every worker finds it running and none stops it
    while another still runs tests; the controller stops it at the end."""
    parallel = getattr(config.option, "numprocesses", None)
    if not parallel or os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("DATABASE_URL"):
        return
    from atlas_jobs._app.db import embedded

    already = (TEST_DATA_DIR / "pg" / "postmaster.pid").exists()
    embedded.ensure_running(TEST_DATA_DIR, max_connections=TEST_MAX_CONNECTIONS)
    config.stash[_STARTED_HERE] = not already


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_STARTED_HERE, False) and not os.environ.get("ATLAS_KEEP_TEST_DB"):
        from atlas_jobs._app.db import embedded

        embedded.stop(TEST_DATA_DIR)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    server, started = server_from_environment(TEST_DATA_DIR, max_connections=TEST_MAX_CONNECTIONS)
    yield server
    if started and not os.environ.get("ATLAS_KEEP_TEST_DB"):
        from atlas_jobs._app.db import embedded

        embedded.stop(TEST_DATA_DIR)


@pytest.fixture(scope="session")
async def template_database(pg_server: Server) -> AsyncIterator[str]:
    """A database migrated to head, cloned (``CREATE DATABASE ... TEMPLATE``) per test."""
    name = f"atlas_template_{uuid.uuid4().hex[:8]}"
    url = await pg_server.create_database(name)
    await alembic(url, "upgrade", "head")
    yield name
    await pg_server.drop_database(name)


@pytest.fixture
async def database_url(pg_server: Server, template_database: str) -> AsyncIterator[str]:
    async with pg_server.scratch_database(template_database) as url:
        yield url


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url, pool_size=5)
    yield engine
    await engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def transitions(clock: Clock) -> Transitions:
    return Transitions(clock, lease_seconds=30)


@pytest.fixture
def jobs(engine: AsyncEngine, transitions: Transitions) -> JobFactory:
    return JobFactory(engine, transitions)


@pytest.fixture(scope="session")
def object_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectServer]:
    """A real S3-compatible server (moto, server mode) for the session."""
    with moto_server(tmp_path_factory.mktemp("moto") / "moto.log") as server:
        yield server


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "atlas-data"
    path.mkdir()
    return path
