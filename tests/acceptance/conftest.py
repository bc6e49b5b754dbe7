"""The whole service as a user meets it: a live API process and real worker processes
on one fresh database, driven only over HTTP."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from tests.support import atlas_process, free_port
from tests.workers.procs import Fleet, WorkerSettings


@dataclass
class Service:
    url: str
    key: str
    fleet: Fleet
    api: subprocess.Popen[bytes]
    api_log: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=self.auth, timeout=30)

    def logs(self) -> str:
        return self.api_log.read_text(errors="replace") + "\n" + self.fleet.logs()


ServiceFactory = Callable[..., Service]
SECRET = "acceptance-signing-secret"

SEED_SETTINGS = WorkerSettings(
    lease_seconds=5.0,
    reaper_interval_seconds=0.5,
    poll_interval_seconds=0.5,
    sweeper_interval_seconds=0.5,
    bundle_time_scale=0.1,
    shutdown_grace_seconds=5.0,
    result_ttl_seconds=3600.0,
)


@pytest.fixture
async def service(
    database_url: str, data_dir: Path, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[ServiceFactory]:
    """Start the API and one worker process, with worker-setting overrides per test."""
    async with engine.begin() as conn:
        key = await create_key(conn, owner="alice", roles=[Role.CLIENT])
    with ExitStack() as stack:

        def start(**overrides: float) -> Service:
            settings = replace(SEED_SETTINGS, **overrides)
            fleet = Fleet(database_url, data_dir, settings, {"ATLAS_SIGNING_SECRET": SECRET})
            stack.callback(fleet.close)
            log_path = tmp_path / "api.log"
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            process = stack.enter_context(
                atlas_process(
                    ["api", "--port", str(port)],
                    env=fleet.env(),
                    log_path=log_path,
                    ready_url=f"{url}/readyz",
                )
            )
            fleet.start("seed-worker", concurrency=2)
            return Service(url, key, fleet, process, log_path)

        yield start
