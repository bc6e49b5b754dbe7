"""API fixtures: the app in-process (with its lifespan) and a live server process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.api.main import create_app
from app.clock import Clock
from app.settings import Settings
from app.transitions import Transitions
from tests.api.support import Driver, Keys, free_port, make_keys
from tests.support import REPO

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


def _wait_live(url: str, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"API exited early:\n{log_path.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/livez", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"API did not become live:\n{log_path.read_text(errors='replace')}")


@pytest.fixture
def live_api(database_url: str, data_dir: Path, tmp_path: Path) -> Iterator[LiveApi]:
    """``python -m app.cli api --port <free>`` against this test's database."""
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
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_live(url, process, log_path)
        yield LiveApi(url, process, log_path)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
