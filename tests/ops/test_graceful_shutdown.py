"""SIGTERM to a real ``atlas-jobs serve`` while a long-poll, an event stream and a job
are running: ``/readyz`` answers 503 before the listener closes, the long-poll is
answered and the stream ends (with its ``retry:`` hint) instead of being cut, the
process exits 0, and the job is finished or back to ``queued`` -- never stuck."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.support import make_keys
from tests.ops.test_worker_metrics import env_for
from tests.support import atlas_process, free_port
from tests.workers.dbwait import bundle_input, eventually, job_row

GRACE_SECONDS = 20


async def test_sigterm_drains_readiness_first_then_watchers_then_exits(
    database_url: str, engine: AsyncEngine, data_dir: Path, tmp_path: Path
) -> None:
    keys = await make_keys(engine)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = env_for(
        database_url,
        data_dir,
        ATLAS_BUNDLE_TIME_SCALE="1.0",  # the coast job takes ~14 s: it is running at SIGTERM
        ATLAS_SHUTDOWN_GRACE_SECONDS=str(GRACE_SECONDS),
        ATLAS_SHUTDOWN_DRAIN_SECONDS="3",
        ATLAS_PORT=str(port),  # chosen by the environment, not by --port
    )
    log_path = tmp_path / "serve.log"
    with atlas_process(
        ["serve", "--workers", "1", "--concurrency", "1"],
        env=env,
        log_path=log_path,
        ready_url=f"{base}/readyz",
    ) as serve:
        started = [
            json.loads(line)
            for line in log_path.read_text().splitlines()
            if '"serve.started"' in line
        ]
        assert started[0]["api"] == f"{base}/v1", "serve says where it listens"
        async with httpx.AsyncClient(base_url=base, headers=keys.a, timeout=60) as http:
            created = await http.post(
                "/v1/jobs", json={"kind": "atlas.bundle", "input": bundle_input("coast")}
            )
            assert created.status_code == 202, created.text
            job_id = uuid.UUID(created.json()["id"])
            # A second job waits in the queue behind it (one slot): nothing changes it
            # until the first ends, so a long-poll on it is held.
            second = await http.post(
                "/v1/jobs", json={"kind": "atlas.bundle", "input": bundle_input("coast")}
            )
            assert second.status_code == 202, second.text
            queued_id = uuid.UUID(second.json()["id"])
            await eventually(
                lambda: job_row(engine, job_id),
                lambda row: row.state == "running",
                timeout=60,
                what="the job to run",
            )

            async def long_poll() -> httpx.Response:
                # If-None-Match of the current version: held until the job changes.
                current = await http.get(f"/v1/jobs/{queued_id}")
                return await http.get(
                    f"/v1/jobs/{queued_id}",
                    headers={"Prefer": "wait=30", "If-None-Match": current.headers["ETag"]},
                )

            async def stream() -> list[str]:
                lines: list[str] = []
                async with http.stream("GET", f"/v1/jobs/{job_id}/events") as answer:
                    assert answer.status_code == 200
                    async for line in answer.aiter_lines():
                        lines.append(line)
                return lines

            readiness: list[int | str] = []

            async def watch_readiness() -> None:
                async with httpx.AsyncClient(timeout=5) as probe:
                    while True:
                        try:
                            answer = await probe.get(
                                f"{base}/readyz", headers={"Connection": "close"}
                            )
                        except httpx.TransportError:
                            readiness.append("closed")
                            return
                        readiness.append(answer.status_code)
                        await asyncio.sleep(0.05)

            held = asyncio.create_task(long_poll())
            streaming = asyncio.create_task(stream())
            await asyncio.sleep(1)  # let both reach their wait (nothing is asserted on it)
            prober = asyncio.create_task(watch_readiness())
            await eventually(
                lambda: asyncio.sleep(0, result=list(readiness)),
                lambda seen: 200 in seen,
                timeout=30,
                what="a first readiness answer",
            )

            os.kill(serve.pid, signal.SIGTERM)

            answered = await held
            lines = await streaming
            await prober
        code = await asyncio.to_thread(serve.wait, GRACE_SECONDS + 30)

    assert code == 0, log_path.read_text()
    # The long-poll was answered (not cut by the closing listener): the current status,
    # with the hint to come back.
    assert answered.status_code in {200, 304}, answered.text
    if answered.status_code == 200:
        assert answered.json()["state"] == "queued"
    assert "Retry-After" in answered.headers
    # The stream opened with its reconnect hint and ended cleanly.
    assert lines[0] == "retry: 2000"
    # Readiness said 503 (draining) before the listener closed.
    assert readiness[-1] == "closed"
    first_503 = readiness.index(503)
    assert all(status == 503 for status in readiness[first_503:-1])
    # The jobs finished, or were released back to the queue (attempt not charged).
    for made in (job_id, queued_id):
        row = await job_row(engine, made)
        assert row.state in {"succeeded", "queued"}, row.state
        if row.state == "queued":
            assert row.charged_attempts == 0
