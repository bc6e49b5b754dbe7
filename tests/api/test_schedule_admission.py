"""Schedules under admission control: a minimum interval between ticks, a per-owner cap
on schedules, and ticks refused -- recorded, counted -- while the owner is at its cap of
unfinished jobs. Before: no minimum, no cap, and with the owner cap reached
``POST /v1/jobs`` answered 429 while a ``* * * * * *`` schedule kept creating jobs."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app import metrics
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.scheduler import Scheduler
from tests.api.support import BUNDLE_INPUT, Keys

CAP = 3


@pytest.fixture
def api_settings(api_settings: Settings) -> Settings:
    return api_settings.model_copy(
        update={"schedule_max_per_owner": 2, "admission_max_active_per_owner": CAP}
    )


def body(cron: str, **overrides: Any) -> dict[str, Any]:
    return {
        "cron": cron,
        "timezone": "UTC",
        "job": {"kind": "atlas.bundle", "input": BUNDLE_INPUT},
        **overrides,
    }


async def test_ticks_closer_than_the_minimum_interval_are_422_naming_cron(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    for cron in ("* * * * * *", "* * * * * */5", "0 * * * * 0,5"):
        refused = await client.post("/v1/schedules", json=body(cron), headers=keys.a)
        assert refused.status_code == 422, (cron, refused.text)
        [error] = refused.json()["errors"]
        assert error["loc"] == ["body", "cron"]
        assert "10 s" in error["msg"], error
    made = await client.post("/v1/schedules", json=body("* * * * * */10"), headers=keys.a)
    assert made.status_code == 201, made.text
    changed = await client.patch(made.json()["url"], json={"cron": "* * * * * */2"}, headers=keys.a)
    assert changed.status_code == 422, changed.text
    assert changed.json()["errors"][0]["loc"] == ["body", "cron"]


async def test_an_owner_beyond_its_schedule_cap_gets_409(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    first = [await client.post("/v1/schedules", json=body("0 2 * * *"), headers=keys.a)]
    first.append(await client.post("/v1/schedules", json=body("0 3 * * *"), headers=keys.a))
    assert [r.status_code for r in first] == [201, 201]
    third = await client.post("/v1/schedules", json=body("0 4 * * *"), headers=keys.a)
    assert third.status_code == 409, third.text
    assert third.headers["content-type"] == "application/problem+json"
    assert third.json()["type"] == "urn:atlas-jobs:problem:too-many-schedules"
    assert third.json()["limit"] == 2
    # another owner has its own cap; deleting one frees a place
    assert (
        await client.post("/v1/schedules", json=body("0 4 * * *"), headers=keys.b)
    ).status_code == 201
    assert (await client.delete(first[0].json()["url"], headers=keys.a)).status_code == 204
    again = await client.post("/v1/schedules", json=body("0 4 * * *"), headers=keys.a)
    assert again.status_code == 201, again.text


def refused_total() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "atlas_schedule_fires_total", {"outcome": "owner_at_capacity"}
    )
    return value or 0.0


async def test_ticks_are_refused_and_recorded_while_the_owner_is_at_its_cap(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    for _ in range(CAP - 1):
        job = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
        assert (await client.post("/v1/jobs", json=job, headers=keys.a)).status_code == 202
    schedule = (
        await client.post("/v1/schedules", json=body("* * * * * */10"), headers=keys.a)
    ).json()
    counted = refused_total()
    clock.advance(35)  # three or four ticks due: one fits under the cap
    scheduler = Scheduler(engine, transitions, admission_cap=CAP)
    assert await scheduler.run_once() == 1
    full = await client.post("/v1/jobs", json=body("")["job"], headers=keys.a)
    assert full.status_code == 429, full.text

    fires = (await client.get(schedule["url"] + "/fires", headers=keys.a)).json()["items"]
    made = [f for f in fires if f["job_id"] is not None]
    refused = [f for f in fires if f["refusal"] is not None]
    assert [f["refusal"] for f in made] == [None]
    assert len(refused) == len(fires) - 1 >= 2
    assert {f["refusal"] for f in refused} == {"owner_at_capacity"}
    assert made[0]["tick"] < min(f["tick"] for f in refused), "the oldest tick is admitted"
    after = (await client.get(schedule["url"], headers=keys.a)).json()
    assert (after["fired_count"], after["refused_count"]) == (1, len(refused))
    assert after["last_refusal"] == "owner_at_capacity"
    assert after["last_refused_at"] == max(f["tick"] for f in refused)
    assert refused_total() == counted + len(refused)
    listed = (await client.get("/v1/jobs", headers=keys.a)).json()["items"]
    assert len(listed) == CAP, "never beyond the cap"


async def test_concurrent_creations_never_overshoot_the_schedule_cap(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    answers = await asyncio.gather(
        *(
            client.post("/v1/schedules", json=body(f"0 {hour} * * *"), headers=keys.a)
            for hour in range(8)
        )
    )
    assert sorted(a.status_code for a in answers) == [201, 201] + [409] * 6
    listed = (await client.get("/v1/schedules", headers=keys.a)).json()["items"]
    assert len(listed) == 2
