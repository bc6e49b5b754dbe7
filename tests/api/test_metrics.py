"""``/metrics`` with values: the database-derived gauges (sampled on a cadence by one
query), the executor's transition counters, job lifetimes, HTTP requests by route
template, pool gauges -- against a real database, through the app's own lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.settings import Settings
from tests.api.support import Keys
from tests.factory import JobFactory
from tests.ops.metrics_text import total, value
from tests.workers.dbwait import eventually

SAMPLE_SECONDS = 0.05


@pytest.fixture
async def sampled_app(api_settings: Settings, clock: Clock) -> AsyncIterator[FastAPI]:
    settings = api_settings.model_copy(update={"metrics_sample_seconds": SAMPLE_SECONDS})
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def http(sampled_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=sampled_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as client:
        yield client


async def scrape(http: httpx.AsyncClient) -> str:
    answer = await http.get("/metrics")
    assert answer.status_code == 200
    return answer.text


async def test_metrics_show_queued_running_failed_and_unresolved_jobs(
    http: httpx.AsyncClient, jobs: JobFactory, clock: Clock, keys: Keys
) -> None:
    before = await scrape(http)
    failed_before = total(before, "atlas_transitions_total", transition="fail", to_state="failed")
    queued = await jobs.make(JobState.QUEUED)
    running = await jobs.make(JobState.RUNNING)
    failed = await jobs.make(JobState.FAILED)
    unresolved = await jobs.make(JobState.UNRESOLVED)

    def sees_all(text: str) -> bool:
        return [
            value(text, "atlas_jobs", kind=made.kind, state=state)
            for made, state in (
                (queued, "queued"),
                (running, "running"),
                (unresolved, "unresolved"),
            )
        ] == [1.0, 1.0, 1.0]

    text = await eventually(lambda: scrape(http), sees_all, timeout=60, what="a sample")
    # Finished jobs are not in the gauge (its query reads unfinished rows only); they
    # are counted as moves, and their lifetime is observed once, by kind and state.
    assert value(text, "atlas_jobs", kind=failed.kind, state="failed") is None
    assert total(text, "atlas_transitions_total", transition="fail", to_state="failed") >= (
        failed_before + 1
    )
    assert value(text, "atlas_job_duration_seconds_count", kind=failed.kind, state="failed") == 1
    assert value(text, "atlas_job_duration_seconds_count", kind=queued.kind, state="failed") is None
    assert value(text, "atlas_jobs_unresolved") == 1
    assert value(text, "atlas_job_start_delay_seconds_count", kind=running.kind) == 1
    assert value(text, "atlas_db_pool_connections_in_use", pool="api") is not None
    assert value(text, "atlas_db_pool_waiting", pool="api") is not None
    assert (value(text, "atlas_queue_sampled_timestamp_seconds") or 0) > 0

    # The oldest claimable age grows while nothing claims the job: database time is
    # moved forward (no sleeping), the next samples see it.
    first = value(text, "atlas_queue_oldest_claimable_age_seconds", kind=queued.kind)
    assert first is not None
    assert first >= 0
    clock.advance(600)

    def grown(text: str) -> bool:
        age = value(text, "atlas_queue_oldest_claimable_age_seconds", kind=queued.kind)
        return age is not None and age >= first + 600

    await eventually(lambda: scrape(http), grown, timeout=60, what="the age to grow")
    # Only claimable jobs are in it: the running one has no age of its own.
    later = await scrape(http)
    assert value(later, "atlas_queue_oldest_claimable_age_seconds", kind=running.kind) is None

    # HTTP requests by route template (never by the id in the path) and status.
    assert (await http.get(f"/v1/jobs/{queued.id}", headers=keys.a)).status_code == 200
    assert (await http.get(f"/v1/jobs/{queued.id}", headers=keys.b)).status_code == 404
    text = await scrape(http)
    for status in ("200", "404"):
        assert (
            value(
                text,
                "atlas_http_requests_total",
                method="GET",
                route="/v1/jobs/{job_id}",
                status=status,
            )
            == 1
        )


async def test_cancels_won_and_lost_to_publication_are_counted_apart(
    http: httpx.AsyncClient, jobs: JobFactory, keys: Keys
) -> None:
    def counts(text: str) -> tuple[float, float]:
        won = total(text, "atlas_transitions_total", transition="request_cancel")
        lost = total(text, "atlas_transitions_total", transition="cancel_too_late")
        return won, lost

    won_before, lost_before = counts(await scrape(http))
    published = await jobs.make(JobState.SUCCEEDED)
    running = await jobs.make(JobState.RUNNING)
    assert (await http.post(f"/v1/jobs/{published.id}/cancel", headers=keys.a)).status_code == 409
    assert (await http.post(f"/v1/jobs/{running.id}/cancel", headers=keys.a)).status_code == 202
    won, lost = counts(await scrape(http))
    # Process-wide counters: compared with what they were before this test.
    assert won == won_before + 1
    assert lost == lost_before + 1


async def test_created_jobs_are_counted_by_kind_and_replays_are_not(
    http: httpx.AsyncClient, keys: Keys
) -> None:
    body = {"kind": "atlas.noop", "input": {"tag": "counted"}}
    keyed = {**keys.a, "Idempotency-Key": "counted-once"}
    for headers in (keys.a, keys.a, keyed, keyed):  # the second keyed one is a replay
        assert (await http.post("/v1/jobs", json=body, headers=headers)).status_code == 202
    batch = {"jobs": [body, body]}
    assert (await http.post("/v1/jobs:batch", json=batch, headers=keys.a)).status_code == 202
    text = await scrape(http)
    assert value(text, "atlas_jobs_created_total", kind="atlas.noop") == 5
