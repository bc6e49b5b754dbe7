"""Priority and concurrency keys on creation, and the operators' scheduling settings,
over HTTP: the fields, each refusal (422 naming the field, 403 for a client), and the
record of who changed what."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.support import BUNDLE_INPUT, Keys
from tests.api.test_errors_auth import assert_problem


def locs(body: Any) -> list[str]:
    return [".".join(error["loc"]) for error in body["errors"]]


def noop(**fields: Any) -> dict[str, Any]:
    return {"kind": "atlas.noop", "input": {}, **fields}


async def test_a_job_keeps_the_priority_it_was_created_with_or_the_default(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    plain = await client.post("/v1/jobs", json=noop(), headers=keys.a)
    urgent = await client.post("/v1/jobs", json=noop(priority=9), headers=keys.a)
    assert (plain.status_code, urgent.status_code) == (202, 202)
    assert plain.json()["priority"] == 4
    assert urgent.json()["priority"] == 9
    read = await client.get(f"/v1/jobs/{urgent.json()['id']}", headers=keys.a)
    assert read.json()["priority"] == 9
    batch = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop(priority=0), noop()]}, headers=keys.a
    )
    assert batch.status_code == 202, batch.text
    assert [job["priority"] for job in batch.json()["items"]] == [0, 4]


@pytest.mark.parametrize("priority", [-1, 10, 2.5, "high", True])
async def test_a_priority_out_of_range_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys, priority: Any
) -> None:
    single = await client.post("/v1/jobs", json=noop(priority=priority), headers=keys.a)
    assert locs(assert_problem(single, 422, "invalid-request")) == ["body.priority"]
    batch = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop(), noop(priority=priority)]}, headers=keys.a
    )
    assert locs(assert_problem(batch, 422, "invalid-request")) == ["body.jobs.1.priority"]


async def test_a_concurrency_key_on_a_kind_that_takes_none_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    single = await client.post("/v1/jobs", json=noop(concurrency_key="c1"), headers=keys.a)
    assert locs(assert_problem(single, 422, "invalid-request")) == ["body.concurrency_key"]
    batch = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop(), noop(concurrency_key="c1")]}, headers=keys.a
    )
    assert locs(assert_problem(batch, 422, "invalid-request")) == ["body.jobs.1.concurrency_key"]
    malformed = await client.post(
        "/v1/jobs", json=noop(concurrency_key="no spaces"), headers=keys.a
    )
    assert locs(assert_problem(malformed, 422, "invalid-request")) == ["body.concurrency_key"]
    listed = await client.get("/v1/jobs", headers=keys.a)
    assert listed.json()["items"] == []  # nothing was created


def schedule(**job: Any) -> dict[str, Any]:
    return {
        "cron": "0 2 * * *",
        "timezone": "UTC",
        "job": {"kind": "atlas.bundle", "input": BUNDLE_INPUT, **job},
    }


async def test_a_schedules_template_keeps_its_priority_and_refuses_a_key_its_kind_takes_none_of(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    created = await client.post("/v1/schedules", json=schedule(priority=8), headers=keys.a)
    assert created.status_code == 201, created.text
    assert created.json()["job"]["priority"] == 8
    out_of_range = await client.post("/v1/schedules", json=schedule(priority=12), headers=keys.a)
    assert locs(assert_problem(out_of_range, 422, "invalid-request")) == ["body.job.priority"]
    keyed = await client.post("/v1/schedules", json=schedule(concurrency_key="c"), headers=keys.a)
    assert locs(assert_problem(keyed, 422, "invalid-request")) == ["body.job.concurrency_key"]


async def test_operators_set_shares_and_key_limits_and_each_change_is_recorded_with_its_actor(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    share = await client.put(
        "/v1/scheduling/owners/alice", json={"share": 3, "note": "big tenant"}, headers=keys.op
    )
    assert share.status_code == 200, share.text
    assert share.json()["share"] == 3
    assert share.json()["updated_by"].startswith("operator:")
    again = await client.put("/v1/scheduling/owners/alice", json={"share": 2}, headers=keys.op)
    assert again.json()["share"] == 2
    key = await client.put(
        "/v1/scheduling/keys/press/customer-7",
        json={"max_running": 3, "rate": {"starts": 10, "per_seconds": 60}},
        headers=keys.op,
    )
    assert key.status_code == 200, key.text
    assert {k: key.json()[k] for k in ("key", "max_running", "running", "rate", "per_seconds")} == {
        "key": "press/customer-7",
        "max_running": 3,
        "running": 0,
        "rate": 10,
        "per_seconds": 60.0,
    }
    now = (await client.get("/v1/scheduling", headers=keys.op)).json()
    assert [(o["owner"], o["share"]) for o in now["owners"]] == [("alice", 2)]
    assert [k["key"] for k in now["keys"]] == ["press/customer-7"]
    changes = (await client.get("/v1/scheduling/changes", headers=keys.op)).json()["items"]
    actor = share.json()["updated_by"]
    assert [
        (c["setting"], c["subject"], c["actor"], c["before"], c["after"], c["note"])
        for c in changes
    ] == [
        (
            "concurrency_key",
            "press/customer-7",
            actor,
            None,
            {"max_running": 3, "rate": 10, "period_seconds": 60.0},
            None,
        ),
        ("owner_share", "alice", actor, {"share": 3}, {"share": 2}, None),
        ("owner_share", "alice", actor, None, {"share": 3}, "big tenant"),
    ]


async def test_scheduling_settings_are_the_operators_and_bad_values_are_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    refused = await client.put("/v1/scheduling/owners/alice", json={"share": 2}, headers=keys.a)
    assert_problem(refused, 403, "forbidden")
    assert_problem(await client.get("/v1/scheduling", headers=keys.a), 403, "forbidden")
    for body, loc in (
        ({"share": 0}, "body.share"),
        ({"share": 1001}, "body.share"),
        ({"share": "3"}, "body.share"),
        ({}, "body.share"),
    ):
        answer = await client.put("/v1/scheduling/owners/alice", json=body, headers=keys.op)
        assert locs(assert_problem(answer, 422, "invalid-request")) == [loc], body
    for body, loc in (
        ({"max_running": -1}, "body.max_running"),
        ({"rate": {"starts": 0, "per_seconds": 1}}, "body.rate.starts"),
        ({"rate": {"starts": 5}}, "body.rate.per_seconds"),
        ({"rate": {"starts": 5, "per_seconds": 0}}, "body.rate.per_seconds"),
    ):
        answer = await client.put("/v1/scheduling/keys/press", json=body, headers=keys.op)
        assert locs(assert_problem(answer, 422, "invalid-request")) == [loc], body
    bad_key = await client.put("/v1/scheduling/keys/a b", json={}, headers=keys.op)
    assert locs(assert_problem(bad_key, 422, "invalid-request")) == ["path.key"]
    assert (await client.get("/v1/scheduling/changes", headers=keys.op)).json()["items"] == []
