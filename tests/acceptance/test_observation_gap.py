"""The t=7 -> t=22 observation gap of seed case B62-14, against the real service: the
j-41 job (``coast`` at the seed's own time scale, 14 s) watched through a TCP proxy the
test controls. Reads fail from the middle of the build until after the job finished;
the client shows *stale* after 10 s without a successful read (never *failed*), then
the first successful read shows the job finished, with a link. Nothing was restarted or
canceled."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from atlas_jobs._app.client import JobsClient, Observer, follow
from atlas_jobs._app.presentation import Observation
from tests.acceptance.conftest import ServiceFactory
from tests.proxy import tcp_proxy

CASE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "B62-14-case.json").read_text()
)


async def wait_until(check: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"never: {what}")


async def test_j41_reads_fail_through_the_build_then_show_it_finished(
    service: ServiceFactory,
) -> None:
    svc = service(bundle_time_scale=1.0, result_ttl_seconds=CASE["result_ttl_seconds"])
    seen: list[tuple[Observation, str, bool]] = []
    observer = Observer()
    stop = threading.Event()

    def render(current: Observer) -> None:
        shown = current.view()
        entry = (current.observation(), shown.label, shown.show_result_link)
        if not seen or seen[-1] != entry:
            seen.append(entry)

    async with svc.client() as http:
        answer = await http.post("/v1/jobs", json=CASE["input"])
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["id"]

        async def state() -> str:
            got: str = (await http.get(f"/v1/jobs/{job_id}")).json()["state"]
            return got

        with (
            tcp_proxy(httpx.URL(svc.url).port or 80) as proxy,
            JobsClient(proxy.url, svc.key) as client,
        ):
            watching = asyncio.create_task(
                asyncio.to_thread(
                    follow,
                    client,
                    job_id,
                    observer,
                    render,
                    keep_going=lambda: not stop.is_set(),
                )
            )
            try:
                # t=7: the client has seen the build under way; from now its reads fail.
                await wait_until(
                    lambda: _true(any(label.startswith("Building tiles") for _, label, _ in seen)),
                    "the watcher saw the build",
                )
                proxy.down()
                # The job goes on without anyone watching, and finishes.
                await wait_until(lambda: _is(state, "succeeded"), "j-41 succeeded")
                await wait_until(
                    lambda: _true(observer.observation() == Observation.STALE),
                    "the watcher turned stale",
                )
                assert observer.status is not None
                assert observer.status["state"] == "running"  # the last known status
                # t=22: reads succeed again.
                proxy.up()
                final = await asyncio.wait_for(watching, timeout=120)
            finally:
                stop.set()
                proxy.up()
        assert final is not None
        assert final["state"] == "succeeded"
        assert final["links"]["result"] == f"/v1/jobs/{job_id}/result"
        assert final["attempt"] == 1

        observations = [o for o, _, _ in seen]
        assert Observation.STALE in observations
        stale_at = observations.index(Observation.STALE)
        assert all("fail" not in label.lower() for _, label, _ in seen)
        assert not any(link for o, _, link in seen if o != Observation.FRESH)
        assert seen[-1] == (Observation.FRESH, "Ready — download", True)
        # Stale came before the first fresh view of the finished job.
        assert all(label != "Ready — download" for _, label, _ in seen[:stale_at])

        history = (await http.get(f"/v1/jobs/{job_id}/history")).json()["items"]
        moves = [(h["from"], h["to"], h["transition"]) for h in history]
        expected = [
            (h["from"], h["to"], h["transition"]) for h in CASE["histories"]["j-41"]["history"]
        ]
        assert moves == expected  # nothing restarted, retried or canceled


async def _true(value: bool) -> bool:
    return value


async def _is(read: Any, wanted: str) -> bool:
    return bool(await read() == wanted)
