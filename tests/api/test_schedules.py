"""``/v1/schedules`` over HTTP: validation, owner scoping, pause/resume, fires."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import job_webhooks
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.scheduler import Scheduler
from tests.api.support import BUNDLE_INPUT, Keys
from tests.support import REPO


def body(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "nightly coast",
        "cron": "0 2 * * *",
        "timezone": "Europe/Berlin",
        "job": {"kind": "atlas.bundle", "input": BUNDLE_INPUT},
        **overrides,
    }


async def test_create_read_list_and_delete(client: httpx.AsyncClient, keys: Keys) -> None:
    created = await client.post("/v1/schedules", json=body(), headers=keys.a)
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert created.headers["Location"] == schedule["url"] == f"/v1/schedules/{schedule['id']}"
    assert schedule["owner"] == "alice"
    assert schedule["enabled"] is True
    assert schedule["misfire_policy"] == "skip"
    assert schedule["catch_up_limit"] == 10
    assert schedule["job"]["kind"] == "atlas.bundle"
    assert schedule["job"]["kind_version"] == 1
    assert schedule["next_fire_at"].endswith(("00:30:00Z", "01:00:00Z", "+00:00"))
    assert schedule["last_fire_at"] is None
    assert schedule["fired_count"] == 0

    read = await client.get(schedule["url"], headers=keys.a)
    assert read.status_code == 200
    assert read.json() == schedule
    listed = await client.get("/v1/schedules", headers=keys.a)
    assert [s["id"] for s in listed.json()["items"]] == [schedule["id"]]

    deleted = await client.delete(schedule["url"], headers=keys.a)
    assert deleted.status_code == 204
    assert (await client.get(schedule["url"], headers=keys.a)).status_code == 404


async def test_the_next_tick_is_read_in_the_schedules_time_zone(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    schedule = (await client.post("/v1/schedules", json=body(), headers=keys.a)).json()
    # 02:00 in Berlin is 00:00 or 01:00 UTC depending on DST
    assert schedule["next_fire_at"][11:19] in ("00:00:00", "01:00:00")


async def test_unschedulable_input_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    cases = [
        (body(cron="61 * * * *"), ["body", "cron"]),
        (body(cron="0 0 31 2 *"), ["body", "cron"]),
        (body(timezone="Mars/Olympus"), ["body", "timezone"]),
        (body(job={"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "pages": []}}), None),
        (body(job={"kind": "no.such.kind", "input": {}}), None),
        (body(catch_up_limit=0), None),
        (body(misfire_policy="sometimes"), None),
        (body(cron="0 2 * * *\u0000"), None),
    ]
    for payload, loc in cases:
        response = await client.post("/v1/schedules", json=payload, headers=keys.a)
        assert response.status_code == 422, (payload, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        if loc is not None:
            assert response.json()["errors"][0]["loc"] == loc
    assert (await client.get("/v1/schedules", headers=keys.a)).json()["items"] == []


async def test_another_owners_schedule_is_404_like_an_unknown_one(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    schedule = (await client.post("/v1/schedules", json=body(), headers=keys.a)).json()
    for method, extra in (("GET", {}), ("PATCH", {"json": {"enabled": False}}), ("DELETE", {})):
        response = await client.request(method, schedule["url"], headers=keys.b, **extra)
        assert response.status_code == 404, (method, response.text)
        assert response.json()["type"] == "urn:atlas-jobs:problem:schedule-not-found"
    fires = await client.get(schedule["url"] + "/fires", headers=keys.b)
    assert fires.status_code == 404
    assert (await client.get("/v1/schedules", headers=keys.b)).json()["items"] == []
    still = await client.get(schedule["url"], headers=keys.a)
    assert still.json()["enabled"] is True


async def test_only_operators_create_for_another_owner_and_see_every_owner(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    refused = await client.post("/v1/schedules", json=body(owner="bob"), headers=keys.a)
    assert refused.status_code == 403
    made = await client.post("/v1/schedules", json=body(owner="bob"), headers=keys.op)
    assert made.status_code == 201
    assert made.json()["owner"] == "bob"
    await client.post("/v1/schedules", json=body(), headers=keys.a)
    everyone = (await client.get("/v1/schedules", headers=keys.op)).json()["items"]
    assert {s["owner"] for s in everyone} == {"alice", "bob"}
    bobs = (await client.get("/v1/schedules", headers=keys.b)).json()["items"]
    assert [s["id"] for s in bobs] == [made.json()["id"]]


async def test_patch_pauses_resumes_and_retimes(client: httpx.AsyncClient, keys: Keys) -> None:
    schedule = (await client.post("/v1/schedules", json=body(), headers=keys.a)).json()
    paused = await client.patch(schedule["url"], json={"enabled": False}, headers=keys.a)
    assert paused.status_code == 200
    assert paused.json()["enabled"] is False
    assert paused.json()["next_fire_at"] is None
    retimed = await client.patch(
        schedule["url"],
        json={"enabled": True, "cron": "*/5 * * * *", "timezone": "UTC", "name": None},
        headers=keys.a,
    )
    assert retimed.status_code == 200, retimed.text
    changed = retimed.json()
    assert changed["cron"] == "*/5 * * * *"
    assert changed["name"] is None
    assert int(changed["next_fire_at"][14:16]) % 5 == 0
    bad = await client.patch(schedule["url"], json={"cron": "nope"}, headers=keys.a)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["loc"] == ["body", "cron"]
    null = await client.patch(schedule["url"], json={"enabled": None}, headers=keys.a)
    assert null.status_code == 422
    unknown = await client.patch(schedule["url"], json={"owner": "bob"}, headers=keys.a)
    assert unknown.status_code == 422
    assert (await client.get(schedule["url"], headers=keys.a)).json()["cron"] == "*/5 * * * *"


async def test_fires_list_the_ticks_and_their_jobs(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    schedule = (
        await client.post(
            "/v1/schedules",
            json=body(
                cron="* * * * * */10", timezone="UTC", job={"kind": "atlas.noop", "input": {}}
            ),
            headers=keys.a,
        )
    ).json()
    clock.advance(35)
    made = await Scheduler(engine, transitions).run_once()
    assert made >= 3
    page = await client.get(schedule["url"] + "/fires", params={"limit": 2}, headers=keys.a)
    first = page.json()
    assert len(first["items"]) == 2
    assert first["next_before"] is not None
    rest = await client.get(
        schedule["url"] + "/fires", params={"before": first["next_before"]}, headers=keys.a
    )
    ticks = [f["tick"] for f in first["items"] + rest.json()["items"]]
    assert len(ticks) == made == len(set(ticks))
    job = await client.get(first["items"][0]["job_url"], headers=keys.a)
    assert job.status_code == 200
    assert job.json()["kind"] == "atlas.noop"
    history = await client.get(first["items"][0]["job_url"] + "/history", headers=keys.a)
    created = history.json()["items"][0]
    assert created["actor"] == "system:scheduler"
    assert created["trigger"]["schedule_id"] == schedule["id"]
    assert created["trigger"]["tick"] == first["items"][0]["tick"]
    after = (await client.get(schedule["url"], headers=keys.a)).json()
    assert after["fired_count"] == made
    assert after["last_job_url"] is not None


async def test_a_schedules_jobs_notify_its_owners_endpoint(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    hook = await client.post(
        "/v1/webhooks", json={"url": "https://93.184.216.34/h"}, headers=keys.a
    )
    bobs = await client.post(
        "/v1/webhooks", json={"url": "https://93.184.216.34/b"}, headers=keys.b
    )
    job = {"kind": "atlas.noop", "input": {}, "notify": bobs.json()["id"]}
    refused = await client.post(
        "/v1/schedules", json=body(cron="* * * * * */10", job=job), headers=keys.a
    )
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["loc"] == ["body", "job", "notify"]
    job["notify"] = hook.json()["id"]
    made = await client.post(
        "/v1/schedules", json=body(cron="* * * * * */10", job=job), headers=keys.a
    )
    assert made.status_code == 201
    assert made.json()["job"]["notify"] == hook.json()["id"]
    clock.advance(25)
    assert await Scheduler(engine, transitions).run_once() >= 2
    async with engine.connect() as conn:
        attached = (await conn.execute(select(job_webhooks.c.webhook_id))).all()
    assert {str(row.webhook_id) for row in attached} == {hook.json()["id"]}
    assert (
        len(attached)
        == (await client.get(made.json()["url"], headers=keys.a)).json()["fired_count"]
    )


async def test_a_schedules_jobs_carry_its_tags_and_a_new_job_replaces_them(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    """The template's tags were accepted and dropped: the schedule answered none and
    its jobs carried none. Now the schedule keeps them (sorted, a set like a job's),
    every job a tick creates carries them, and a PATCH with a new job replaces them."""
    job = {"kind": "atlas.noop", "input": {}, "tags": ["team=data", "customer=acme"]}
    repeated = await client.post(
        "/v1/schedules",
        json=body(job={**job, "tags": ["team=data", "team=data"]}),
        headers=keys.a,
    )
    assert repeated.status_code == 422, repeated.text
    assert repeated.json()["errors"][0]["loc"] == ["body", "job", "tags", "1"]
    made = await client.post(
        "/v1/schedules", json=body(cron="* * * * * */10", timezone="UTC", job=job), headers=keys.a
    )
    assert made.status_code == 201, made.text
    schedule = made.json()
    assert schedule["job"]["tags"] == ["customer=acme", "team=data"]
    assert (await client.get(schedule["url"], headers=keys.a)).json() == schedule
    paused = await client.patch(schedule["url"], json={"enabled": False}, headers=keys.a)
    assert paused.json()["job"]["tags"] == ["customer=acme", "team=data"]  # kept
    await client.patch(schedule["url"], json={"enabled": True}, headers=keys.a)

    clock.advance(15)
    assert await Scheduler(engine, transitions).run_once() >= 1
    fire = (await client.get(schedule["url"] + "/fires", headers=keys.a)).json()["items"][0]
    created = (await client.get(fire["job_url"], headers=keys.a)).json()
    assert created["tags"] == ["customer=acme", "team=data"]
    found = await client.get("/v1/jobs", params={"tag": "team=data"}, headers=keys.a)
    assert created["id"] in [j["id"] for j in found.json()["items"]]

    changed = await client.patch(
        schedule["url"],
        json={"job": {"kind": "atlas.noop", "input": {}, "tags": ["batch=nightly"]}},
        headers=keys.a,
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["job"]["tags"] == ["batch=nightly"]
    clock.advance(10)
    assert await Scheduler(engine, transitions).run_once() >= 1
    newest = (await client.get(schedule["url"] + "/fires", headers=keys.a)).json()["items"][0]
    assert newest["tick"] > fire["tick"]
    later = (await client.get(newest["job_url"], headers=keys.a)).json()
    assert later["tags"] == ["batch=nightly"]
    assert (await client.get(fire["job_url"], headers=keys.a)).json()["tags"] == [
        "customer=acme",
        "team=data",
    ]  # a job keeps the tags it was created with

    untagged = await client.patch(
        schedule["url"], json={"job": {"kind": "atlas.noop", "input": {}}}, headers=keys.a
    )
    assert untagged.json()["job"]["tags"] == []


async def test_the_queue_view_shows_schedules_with_their_next_tick_and_lateness(
    client: httpx.AsyncClient, keys: Keys, clock: Clock
) -> None:
    made = (
        await client.post(
            "/v1/schedules", json=body(cron="* * * * * */10", timezone="UTC"), headers=keys.a
        )
    ).json()
    paused = (await client.post("/v1/schedules", json=body(enabled=False), headers=keys.b)).json()
    clock.advance(40)  # no scheduler runs: the tick falls behind
    view = await client.get("/v1/queue", headers=keys.op)
    assert view.status_code == 200
    shown = {s["id"]: s for s in view.json()["schedules"]}
    assert paused["id"] not in shown
    line = shown[made["id"]]
    assert line["next_fire_at"] == made["next_fire_at"]
    assert line["overdue_seconds"] > 25
    assert line["kind"] == "atlas.bundle"
    assert view.json()["webhooks_pending"] == 0
    assert (await client.get("/v1/queue", headers=keys.a)).status_code == 403


async def test_every_before_the_documented_pattern_matches_is_served(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """``before=0000-01-01T00:00:00Z`` matched the documented pattern and was 422 (no
    year 0); now the pattern names years 0001-9999, and an instant a datetime cannot
    hold in UTC (the first and last years with an offset) is still a bound."""
    document = json.loads((REPO / "openapi" / "openapi.json").read_text())
    [parameter] = [
        p
        for p in document["paths"]["/v1/schedules/{schedule_id}/fires"]["get"]["parameters"]
        if p["name"] == "before"
    ]
    pattern = re.compile(parameter["schema"]["anyOf"][0]["pattern"])
    schedule = (await client.post("/v1/schedules", json=body(), headers=keys.a)).json()
    fires = schedule["url"] + "/fires"
    assert not pattern.match("0000-01-01T00:00:00Z")
    year_zero = await client.get(fires, params={"before": "0000-01-01T00:00:00Z"}, headers=keys.a)
    assert year_zero.status_code == 422
    for edge in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00Z"):
        assert pattern.match(edge)
        page = await client.get(fires, params={"before": edge}, headers=keys.a)
        assert page.status_code == 200, (edge, page.text)
        assert page.json()["items"] == []
