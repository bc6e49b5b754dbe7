"""The seed histories of docs/protocol.md §8, end to end: HTTP API process + worker process.

Time runs at 0.1x the seed timeline (``coast`` takes ~1.4 s instead of 14 s). Every
observation is made the way a client makes it: status reads (long-polled with
``Prefer: wait`` and ``If-None-Match``), the history, the result and the download.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from typing import Any

import httpx

from atlas_jobs._app.presentation import Observation, present
from tests.acceptance.conftest import ServiceFactory

BUNDLE = {"preset": "coast", "pages": ["cover", "summary"], "format": "text-bundle-v1"}
TERMINAL = {"succeeded", "failed", "canceled"}


async def submit(http: httpx.AsyncClient, preset: str) -> str:
    answer = await http.post(
        "/v1/jobs", json={"kind": "atlas.bundle", "input": {**BUNDLE, "preset": preset}}
    )
    assert answer.status_code == 202, answer.text
    assert answer.headers["Location"] == f"/v1/jobs/{answer.json()['id']}"
    job_id: str = answer.json()["id"]
    return job_id


async def observe(
    http: httpx.AsyncClient, job_id: str, *, until: Any, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """Long-poll the status until ``until(status)`` holds; every snapshot seen, in order."""
    seen: list[dict[str, Any]] = []
    etag: str | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        headers = {"Prefer": "wait=5"}
        if etag:
            headers["If-None-Match"] = etag
        answer = await http.get(f"/v1/jobs/{job_id}", headers=headers)
        if answer.status_code == 304:
            continue
        assert answer.status_code == 200, answer.text
        etag = answer.headers["ETag"]
        status = answer.json()
        seen.append(status)
        if until(status):
            return seen
    raise AssertionError(f"job {job_id} never reached the condition; last: {seen[-1:]}")


async def history(http: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    answer = await http.get(f"/v1/jobs/{job_id}/history")
    assert answer.status_code == 200
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


def build_stage(status: dict[str, Any]) -> dict[str, Any] | None:
    stages = {s["name"]: s for s in status["progress"]["stages"]}
    return stages.get("build")


async def test_j41_success_with_plan_expansion_then_expiry(service: ServiceFactory) -> None:
    svc = service(result_ttl_seconds=4.0)
    async with svc.client() as http:
        job_id = await submit(http, "coast")
        seen = await observe(http, job_id, until=lambda s: s["state"] in TERMINAL)
        final = seen[-1]
        assert final["state"] == "succeeded", svc.logs()
        assert final["delivery"]["state"] == "available"
        assert final["links"]["result"] == f"/v1/jobs/{job_id}/result"

        # "2 of 6 tiles; plan expanded": the plan grew to 6 at revision 2 after 2 tiles.
        expanded = [
            s
            for s in seen
            if (b := build_stage(s)) and b["total"] == 6 and s["progress"]["plan_revision"] == 2
        ]
        assert expanded, "the plan expansion was never visible"
        assert build_stage(expanded[0])["done"] == 2  # type: ignore[index]
        assert all(
            build_stage(s)["total"] == 4  # type: ignore[index]
            for s in seen
            if build_stage(s) and s["progress"]["plan_revision"] == 1
        )
        assert build_stage(final) == {"name": "build", "unit": "tiles", "done": 6, "total": 6}

        moves = [(h["from"], h["to"], h["transition"]) for h in await history(http, job_id)]
        assert moves[0] == (None, "queued", "create")
        assert ("queued", "running", "claim") in moves
        assert ("running", "running", "expand_plan") in moves
        assert moves[-1] == ("running", "succeeded", "publish")

        # The download works and matches the manifest.
        result = await http.get(f"/v1/jobs/{job_id}/result")
        assert result.status_code == 200
        files = {f["name"]: f for f in result.json()["files"]}
        assert {"manifest.json", "bundle.zip"} <= set(files)
        async with httpx.AsyncClient(base_url=svc.url) as anonymous:
            manifest_bytes = (await anonymous.get(files["manifest.json"]["url"])).content
            bundle = await anonymous.get(files["bundle.zip"]["url"])
        assert bundle.status_code == 200
        assert hashlib.sha256(bundle.content).hexdigest() == files["bundle.zip"]["sha256"]
        manifest = json.loads(manifest_bytes)
        assert manifest["job_id"] == job_id
        assert manifest["format"] == "text-bundle-v1"
        tiles = sorted(manifest["files"])
        assert tiles == sorted(
            f"{t}.txt"
            for t in (
                "cover-title",
                "cover-key",
                "cover-legend",
                "summary-counts",
                "summary-notes",
                "summary-source",
            )
        )
        with zipfile.ZipFile(io.BytesIO(bundle.content)) as archive:
            assert tiles == sorted(n for n in archive.namelist() if n.endswith(".txt"))

        # Retention passes: delivery expired, the state is still succeeded.
        expired = await observe(
            http, job_id, until=lambda s: s["delivery"]["state"] == "expired", timeout=30
        )
        assert expired[-1]["state"] == "succeeded"
        assert (await http.get(f"/v1/jobs/{job_id}/result")).status_code == 410
        async with httpx.AsyncClient(base_url=svc.url) as anonymous:
            assert (await anonymous.get(files["bundle.zip"]["url"])).status_code == 410


async def test_j42_permanent_failure_blocks_private_outputs(service: ServiceFactory) -> None:
    svc = service()
    async with svc.client() as http:
        job_id = await submit(http, "reef")
        final = (await observe(http, job_id, until=lambda s: s["state"] in TERMINAL))[-1]
        assert final["state"] == "failed", svc.logs()
        assert final["error"]["retryable"] is False
        assert final["error"]["message"]
        assert final["links"]["result"] is None
        assert final["delivery"]["state"] == "blocked"
        answer = await http.get(f"/v1/jobs/{job_id}/result")
        assert answer.status_code == 409
        assert answer.headers["content-type"].startswith("application/problem+json")


async def test_j43_cancel_during_build(service: ServiceFactory) -> None:
    svc = service(bundle_time_scale=0.3)
    async with svc.client() as http:
        job_id = await submit(http, "coast")
        await observe(http, job_id, until=lambda s: s["progress"]["stage"] == "build")
        canceled = await http.post(f"/v1/jobs/{job_id}/cancel")
        assert canceled.status_code == 202
        assert canceled.json()["state"] == "cancel_requested"
        final = (await observe(http, job_id, until=lambda s: s["state"] in TERMINAL))[-1]
        assert final["state"] == "canceled", svc.logs()
        assert final["links"]["result"] is None
        assert final["delivery"]["state"] in {"blocked", "none"}
        moves = [(h["from"], h["to"]) for h in await history(http, job_id)]
        assert moves[-2:] == [("running", "cancel_requested"), ("cancel_requested", "canceled")]
        assert (await http.get(f"/v1/jobs/{job_id}/result")).status_code == 409


async def test_j44_cancel_during_publication_loses(service: ServiceFactory) -> None:
    svc = service(bundle_time_scale=0.3)
    async with svc.client() as http:
        job_id = await submit(http, "coast")
        await observe(http, job_id, until=lambda s: s["progress"]["stage"] == "publish")
        late = await http.post(f"/v1/jobs/{job_id}/cancel")
        # Either the cancel found the job still running (202, cancel_requested) and the
        # publication that had begun won anyway, or it waited on the row lock and found
        # the job succeeded (409 naming the winner). Both leave the cancel in history.
        assert late.status_code in {202, 409}, late.text
        final = (await observe(http, job_id, until=lambda s: s["state"] in TERMINAL))[-1]
        assert final["state"] == "succeeded", svc.logs()
        assert final["delivery"]["state"] == "available"
        assert final["links"]["result"] is not None
        assert (await http.get(f"/v1/jobs/{job_id}/result")).status_code == 200
        cancels = [h for h in await history(http, job_id) if h["transition"] == "request_cancel"]
        assert len(cancels) == 1
        if late.status_code == 409:
            assert late.json()["state"] == "succeeded"


async def test_squall_retries_twice_then_succeeds(service: ServiceFactory) -> None:
    svc = service()
    async with svc.client() as http:
        job_id = await submit(http, "squall")
        seen = await observe(http, job_id, until=lambda s: s["state"] in TERMINAL)
        final = seen[-1]
        assert final["state"] == "succeeded", svc.logs()
        assert final["attempt"] == 3
        retries = [h for h in await history(http, job_id) if h["transition"] == "retry_later"]
        assert [h["attempt"] for h in retries] == [1, 2]
        assert all(h["to"] == "queued" and h["reason"] == "retry" for h in retries)
        waiting_for_retry = [s for s in seen if s["state"] == "queued" and s["reason"] == "retry"]
        assert all(s["last_error"] and s["last_error"]["retryable"] for s in waiting_for_retry)
        # Each attempt's error survives the success: the history keeps the cause of
        # every retry, and the retry label names it while it waits.
        assert all(h["error"] and h["error"]["retryable"] for h in retries), retries
        assert all(h["error"]["message"] for h in retries)
        for waiting in waiting_for_retry:
            label = present(waiting, Observation.FRESH).label
            assert label == f"Queued; retrying after an error: {waiting['last_error']['message']}"
