"""The log canary over a whole ``serve`` (API and worker processes) in production mode:
every line any of them writes is one JSON object, and none carries a job's input, a
result's contents, an API key or a signed download URL -- including the worker's lines
about jobs that succeed, fail permanently, and fail on unexpected errors."""

from __future__ import annotations

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


async def test_every_line_of_serve_is_json_and_carries_no_secret(
    database_url: str, engine: AsyncEngine, data_dir: Path, tmp_path: Path
) -> None:
    keys = await make_keys(engine)
    secret = f"canary-{uuid.uuid4().hex}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    env = env_for(database_url, data_dir, ATLAS_LOG_LEVEL="DEBUG")
    with atlas_process(
        ["serve", "--port", str(port), "--workers", "2"],
        env=env,
        log_path=log_path,
        ready_url=f"{base}/readyz",
    ) as serve:
        async with httpx.AsyncClient(base_url=base, headers=keys.a, timeout=30) as http:
            ids = []
            for kind, job_input in (
                ("atlas.noop", {"tag": secret}),
                ("atlas.bundle", bundle_input("coast")),
                ("atlas.bundle", bundle_input("reef")),  # fails permanently
            ):
                created = await http.post(
                    "/v1/jobs",
                    json={"kind": kind, "input": job_input},
                    headers={"Idempotency-Key": f"{secret}-{len(ids)}"},
                )
                assert created.status_code == 202, created.text
                ids.append(uuid.UUID(created.json()["id"]))
            for job_id in ids:
                await eventually(
                    lambda job_id=job_id: job_row(engine, job_id),
                    lambda row: row.state in {"succeeded", "failed"},
                    timeout=120,
                    what="the jobs to end",
                )
            result = (await http.get(f"/v1/jobs/{ids[1]}/result")).json()
            url = result["files"][0]["url"]
            assert (await http.get(url)).status_code == 200
        os.kill(serve.pid, signal.SIGTERM)
        assert serve.wait(timeout=60) == 0
    logs = log_path.read_text()
    lines = [line for line in logs.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(event, dict) and "event" in event for event in events)
    # Worker processes' lines are in it (so the canary covers them) ...
    worker_events = {e["event"] for e in events if str(e.get("worker_id", "")).startswith("serve-")}
    assert {"worker.started", "worker.stopped"} <= worker_events, sorted(worker_events)
    assert any(e.get("job_id") == str(ids[2]) for e in events), "the failed job is logged"
    # ... and nothing secret is anywhere.
    token = url.rsplit("/", 1)[1]
    for needle in (secret, keys.alice, keys.alice[:20], token, token[:24]):
        assert needle not in logs
