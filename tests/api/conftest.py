"""API fixtures: the app in-process (with its lifespan) and a live server process."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Transitions
from tests.api.support import Driver, Keys, make_keys
from tests.support import atlas_process, free_port

SIGNING_SECRET = "test-signing-secret-not-for-production"


@pytest.fixture
def api_settings(database_url: str, data_dir: Path) -> Settings:
    return Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret=SIGNING_SECRET,
        max_wait_seconds=5,
        max_body_bytes=64 * 1024,
    )


@pytest.fixture
async def app(api_settings: Settings, clock: Clock) -> AsyncIterator[FastAPI]:
    application = create_app(api_settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as http:
        yield http


@pytest.fixture
async def keys(engine: AsyncEngine) -> Keys:
    return await make_keys(engine)


@pytest.fixture
def driver(engine: AsyncEngine, transitions: Transitions, data_dir: Path) -> Driver:
    return Driver(engine, transitions, data_dir)


@dataclass
class LiveApi:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def live_api(database_url: str, data_dir: Path, tmp_path: Path) -> Iterator[LiveApi]:
    """``python -m atlas_jobs._app.cli api --port <free>`` against this test's database."""
    port = free_port()
    log_path = tmp_path / "api.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SIGNING_SECRET,
        "ATLAS_LOG_FORMAT": "json",
        "ATLAS_LOG_LEVEL": "DEBUG",
        "ATLAS_MAX_WAIT_SECONDS": "5",
        "ATLAS_MAX_BODY_BYTES": str(64 * 1024),
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "1",
    }
    url = f"http://127.0.0.1:{port}"
    args = ["api", "--port", str(port)]
    with atlas_process(args, env=env, log_path=log_path, ready_url=f"{url}/livez") as process:
        yield LiveApi(url, process, log_path)
