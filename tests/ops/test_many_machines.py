"""Many machines, one PostgreSQL: two API processes and three worker processes, each
with its own data directory, sharing only the database, an S3-compatible object store
(a real moto server) and the signing secret from the environment. Jobs created through
one API complete, stream and download through the other."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.support import make_keys, parse_sse
from tests.objectstore import ObjectServer
from tests.support import atlas_process, free_port
from tests.workers.dbwait import bundle_input

pytestmark = pytest.mark.slow

SECRET = "shared-signing-secret-from-the-environment"


@pytest.fixture
def fleet(
    database_url: str, object_server: ObjectServer, tmp_path: Path
) -> Iterator[tuple[list[str], list[Path], str]]:
    bucket = object_server.new_bucket()
    common = {
        **os.environ,
        **object_server.env(bucket),
        "DATABASE_URL": database_url,
        "ATLAS_SIGNING_SECRET": SECRET,
        "ATLAS_BUNDLE_TIME_SCALE": "0.05",
        "ATLAS_POLL_INTERVAL_SECONDS": "0.5",
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "2",
        "ATLAS_LOG_FORMAT": "json",
    }
    data_dirs: list[Path] = []
    apis: list[str] = []
    with ExitStack() as stack:
        for n in range(2):
            data_dir = tmp_path / f"api-{n}"
            data_dirs.append(data_dir)
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            stack.enter_context(
                atlas_process(
                    ["api", "--port", str(port)],
                    env={**common, "ATLAS_DATA_DIR": str(data_dir)},
                    log_path=tmp_path / f"api-{n}.log",
                    ready_url=f"{url}/readyz",
                )
            )
            apis.append(url)
        for n in range(3):
            data_dir = tmp_path / f"worker-{n}"
            data_dirs.append(data_dir)
            metrics = free_port()
            stack.enter_context(
                atlas_process(
                    ["worker", "--concurrency", "2", "--metrics-port", str(metrics)],
                    env={**common, "ATLAS_DATA_DIR": str(data_dir)},
                    log_path=tmp_path / f"worker-{n}.log",
                    ready_url=f"http://127.0.0.1:{metrics}/metrics",
                )
            )
        yield apis, data_dirs, bucket


async def test_jobs_cross_from_one_api_to_the_other_through_the_shared_stores(
    fleet: tuple[list[str], list[Path], str],
    engine: AsyncEngine,
    object_server: ObjectServer,
) -> None:
    apis, data_dirs, bucket = fleet
    keys = await make_keys(engine)
    created: list[tuple[str, str]] = []  # (job id, the OTHER api)
    async with httpx.AsyncClient(headers=keys.a, timeout=60) as http:
        for n in range(6):
            here, there = apis[n % 2], apis[(n + 1) % 2]
            answer = await http.post(
                f"{here}/v1/jobs", json={"kind": "atlas.bundle", "input": bundle_input("coast")}
            )
            assert answer.status_code == 202, answer.text
            created.append((answer.json()["id"], there))

        # One job's whole story, streamed through the API that did not create it.
        job_id, there = created[0]
        async with http.stream("GET", f"{there}/v1/jobs/{job_id}/events") as stream:
            assert stream.status_code == 200
            text = (await stream.aread()).decode()
        transitions = [
            json.loads(event["data"])["to"]
            for event in parse_sse(text)
            if event.get("event") == "transition"
        ]
        assert transitions[0] == "queued"
        assert transitions[-1] == "succeeded"

        for job_id, there in created:
            # Wait for the end through the other API (held reads, no sleeping).
            for _ in range(120):
                status = (
                    await http.get(f"{there}/v1/jobs/{job_id}", headers={"Prefer": "wait=10"})
                ).json()
                if status["state"] not in {"queued", "running"}:
                    break
            assert status["state"] == "succeeded", status
            result = await http.get(f"{there}/v1/jobs/{job_id}/result")
            assert result.status_code == 200, result.text
            for entry in result.json()["files"]:
                assert entry["url"].startswith(there)  # links name the API that was asked
                download = await http.get(entry["url"], headers={"Authorization": ""})
                assert download.status_code == 200
                assert hashlib.sha256(download.content).hexdigest() == entry["sha256"]
                assert len(download.content) == entry["size"]

    # Nothing was kept on any machine's disk: the results are in the bucket.
    for data_dir in data_dirs:
        assert not (data_dir / "results").exists(), data_dir
    published = [key for key in object_server.keys(bucket) if key.startswith("published/")]
    assert {key.split("/")[2] for key in published} == {job_id for job_id, _ in created}
    assert not [key for key in object_server.keys(bucket) if key.startswith("staging/")]
