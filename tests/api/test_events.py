"""Server-Sent Events: transitions with ids (history seq), progress, Last-Event-ID."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx

from atlas_jobs._app.lifecycle import DeliveryState
from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, WORKER, Driver, Keys, parse_sse, streamed_events

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def test_finished_job_streams_its_history_and_ends(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"])
    await driver.succeed(job_id, "alice", {"bundle.zip": b"zip"})
    response = await client.get(f"/v1/jobs/{job_id}/events", headers=keys.a)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    assert [e["event"] for e in events] == ["transition"] * 3
    items = [json.loads(e["data"]) for e in events]
    assert [(i["from"], i["to"]) for i in items] == [
        (None, "queued"),
        ("queued", "running"),
        ("running", "succeeded"),
    ]
    assert [int(e["id"]) for e in events] == [i["seq"] for i in items]

    resumed = await client.get(
        f"/v1/jobs/{job_id}/events", headers={**keys.a, "Last-Event-ID": events[0]["id"]}
    )
    assert [e["id"] for e in parse_sse(resumed.text)] == [events[1]["id"], events[2]["id"]]


async def test_live_stream_shows_transitions_and_progress_as_they_happen(
    live_api: LiveApi, keys: Keys, driver: Driver
) -> None:
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        job_id = uuid.UUID((await http.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"])
        seen: list[tuple[str, str]] = []
        saw_progress = asyncio.Event()

        async def drive() -> None:
            attempt = await driver.claim(job_id)
            await asyncio.sleep(0.2)
            await driver.progress(job_id, attempt)  # version bump, no history row
            # The stream shows the latest state of each change it reads: wait until it
            # has shown this one before the next change (no race with a loaded machine).
            async with asyncio.timeout(20):
                await saw_progress.wait()
            async with driver.engine.begin() as conn:
                await driver.t.stage_output(
                    conn, job_id, attempt, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
                )
            await asyncio.sleep(0.2)
            await driver.publish(job_id, attempt, "alice", {"bundle.zip": b"zip"})

        async with http.stream("GET", f"/v1/jobs/{job_id}/events", headers=keys.a) as response:
            assert response.status_code == 200
            driving = asyncio.create_task(drive())
            async for event in streamed_events(response):
                data = json.loads(event["data"])
                if event["event"] == "transition":
                    seen.append(("transition", data["to"]))
                else:
                    seen.append(("progress", data["progress"]["stage"] or "-"))
                    if data["progress"]["stage"] == "validate":
                        saw_progress.set()
            await driving
    transitions = [s for kind, s in seen if kind == "transition"]
    assert transitions == ["queued", "running", "succeeded"]
    assert ("progress", "validate") in seen
    assert seen[-1] == ("transition", "succeeded")  # the stream ended after the terminal move
