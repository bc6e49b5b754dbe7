"""The ``document.publish`` world for acceptance tests: the API, worker processes and
the test destination (``atlas-jobs dev-destination``), each a real process, driven
over HTTP only (the database is read only to find which worker holds a job)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from tests.support import REPO, atlas_process, free_port
from tests.workers.procs import Fleet, WorkerProcess, WorkerSettings

TERMINAL = {"succeeded", "failed", "canceled"}

SETTINGS = WorkerSettings(
    lease_seconds=2.0,
    reaper_interval_seconds=0.3,
    poll_interval_seconds=0.3,
    sweeper_interval_seconds=0.3,
    bundle_time_scale=0.02,
    shutdown_grace_seconds=3.0,
)


def document(sections: int = 2, *, destination: str = "press", **extra: Any) -> dict[str, Any]:
    return {
        "title": "Quarterly harbour report",
        "sections": [
            {"heading": f"Part {n}", "text": f"confidential-canary section {n} text"}
            for n in range(1, sections + 1)
        ],
        "destination": destination,
        **extra,
    }


@dataclass
class Keys:
    client: str
    reviewer: str
    operator: str


@dataclass
class World:
    url: str
    destination_url: str
    keys: Keys
    fleet: Fleet
    api_log: Path
    destination_log: Path
    stack: ExitStack
    workers: list[WorkerProcess] = field(default_factory=list)

    def client(self, key: str | None = None) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key or self.keys.client}"},
            timeout=30,
        )

    def logs(self) -> str:
        return (
            self.api_log.read_text(errors="replace")[-3000:]
            + "\n"
            + self.fleet.logs()
            + "\n--- destination\n"
            + self.destination_log.read_text(errors="replace")[-2000:]
        )

    # -- the destination ---------------------------------------------------------------

    async def control(self, **settings: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.destination_url, timeout=10) as http:
            answer = await http.post("/control", json=settings)
            assert answer.status_code == 200, answer.text
            found: dict[str, Any] = answer.json()
            return found

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.destination_url, timeout=10) as http:
            found: dict[str, Any] = (await http.get("/control/stats")).json()
            return found

    # -- jobs ------------------------------------------------------------------------------

    async def submit(self, doc: dict[str, Any]) -> str:
        async with self.client() as http:
            answer = await http.post("/v1/jobs", json={"kind": "document.publish", "input": doc})
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["id"]
        return job_id

    async def status(self, job_id: str) -> dict[str, Any]:
        async with self.client(self.keys.operator) as http:
            answer = await http.get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    async def until(
        self, job_id: str, check: Callable[[dict[str, Any]], bool], timeout: float = 90
    ) -> dict[str, Any]:
        """Long-poll the status until ``check`` holds (never a timing assertion: the
        timeout only bounds a broken run)."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        etag: str | None = None
        async with self.client(self.keys.operator) as http:
            while time.monotonic() < deadline:
                headers = {"Prefer": "wait=2"}
                if etag is not None:
                    headers["If-None-Match"] = etag
                answer = await http.get(f"/v1/jobs/{job_id}", headers=headers)
                if answer.status_code == 304:
                    continue
                assert answer.status_code == 200, answer.text
                etag = answer.headers["ETag"]
                last = answer.json()
                if check(last):
                    return last
        raise AssertionError(f"{job_id} never reached the condition; last {last}\n{self.logs()}")

    async def waiting_for_review(self, job_id: str) -> dict[str, Any]:
        return await self.until(
            job_id, lambda s: (s["state"], s["reason"]) == ("waiting", "review")
        )

    async def finished(self, job_id: str, timeout: float = 90) -> dict[str, Any]:
        return await self.until(job_id, lambda s: s["state"] in TERMINAL, timeout)

    async def review(self, job_id: str, decision: str, note: str | None = None) -> httpx.Response:
        async with self.client(self.keys.reviewer) as http:
            return await http.post(
                f"/v1/jobs/{job_id}/review", json={"decision": decision, "note": note}
            )

    async def approve(self, job_id: str) -> None:
        await self.waiting_for_review(job_id)
        answer = await self.review(job_id, "approve", "looks right")
        assert answer.status_code == 202, answer.text

    async def history(self, job_id: str) -> list[dict[str, Any]]:
        async with self.client(self.keys.operator) as http:
            answer = await http.get(f"/v1/jobs/{job_id}/history")
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        return items

    def start_worker(self, name: str, *, concurrency: int = 4) -> WorkerProcess:
        worker = self.fleet.start(name, concurrency=concurrency, metrics_port=free_port())
        self.workers.append(worker)
        return worker


async def worker_metrics(worker: WorkerProcess) -> str:
    """The worker's Prometheus text (``--metrics-port``)."""
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.get(f"http://127.0.0.1:{worker.metrics_port}/metrics")
    assert answer.status_code == 200, answer.text
    return answer.text


def operations(history: list[dict[str, Any]]) -> list[str]:
    """The outcomes of a job's external operation entries, in order."""
    return [h["data"]["outcome"] for h in history if h["transition"] == "record_operation"]


def start_world(
    database_url: str,
    data_dir: Path,
    keys: Keys,
    stack: ExitStack,
    *,
    destination: dict[str, Any] | None = None,
    workers: int = 1,
    concurrency: int = 4,
    **overrides: float,
) -> World:
    """The destination, the API and ``workers`` worker processes, all torn down by
    ``stack``. ``destination`` overrides the ``press`` entry of ATLAS_DESTINATIONS."""
    dest_port = free_port()
    destination_url = f"http://127.0.0.1:{dest_port}"
    dest_log = data_dir / "destination.log"
    with dest_log.open("wb") as log:
        dest = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "atlas_jobs._app.cli",
                "dev-destination",
                "--port",
                str(dest_port),
                "--data",
                str(data_dir / "destination.sqlite3"),
            ],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    stack.callback(_kill, dest)
    _await_http(f"{destination_url}/health", dest, dest_log)
    press = {
        "url": destination_url,
        "timeout_seconds": 1.5,
        "concurrency": 4,
        "reconcile_checks": 3,
        "reconcile_interval_seconds": 0.2,
        **(destination or {}),
    }
    settings = replace(SETTINGS, **overrides)
    fleet = Fleet(
        database_url,
        data_dir,
        settings,
        {
            "ATLAS_DESTINATIONS": json.dumps({"press": press}),
            "ATLAS_DOCUMENT_TIME_SCALE": "0.02",
            "ATLAS_SIGNING_SECRET": "publishing-secret",
        },
    )
    stack.callback(fleet.close)
    api_port = free_port()
    url = f"http://127.0.0.1:{api_port}"
    api_log = data_dir / "api.log"
    stack.enter_context(
        atlas_process(
            ["api", "--port", str(api_port)],
            env=fleet.env(),
            log_path=api_log,
            ready_url=f"{url}/readyz",
        )
    )
    world = World(url, destination_url, keys, fleet, api_log, dest_log, stack)
    for n in range(workers):
        world.start_worker(f"pub-{n}", concurrency=concurrency)
    return world


def _await_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the destination exited:\n{log.read_text()}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the destination never answered:\n{log.read_text()}")


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=10)


async def gather(*calls: Any) -> list[Any]:
    return list(await asyncio.gather(*calls))
