"""docs/protocol.md §3 rows for /v1/jobs: create, read, list, cancel, history (in-process)."""

from __future__ import annotations

import uuid

import httpx

from atlas_jobs._app.lifecycle import JobState
from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def create(
    client: httpx.AsyncClient, headers: dict[str, str], **extra: str
) -> httpx.Response:
    response = await client.post("/v1/jobs", json=BUNDLE, headers={**headers, **extra})
    assert response.status_code == 202, response.text
    return response


async def test_create_answers_202_with_location_retry_after_and_status(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    response = await create(client, keys.a)
    body = response.json()
    assert response.headers["location"] == f"/v1/jobs/{body['id']}"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["etag"].startswith('W/"')
    assert body["state"] == "queued"
    assert body["reason"] == "new"
    assert body["kind"] == "atlas.bundle"
    assert body["kind_version"] == 1
    assert body["attempt"] == 0
    assert body["max_attempts"] >= 1
    assert body["delivery"] == {
        "state": "none",
        "expires_at": None,
        "files": None,
        "destination": None,
    }
    assert body["progress"] == {"stage": None, "plan_revision": 0, "stages": []}
    assert body["links"]["self"] == response.headers["location"]
    assert body["links"]["cancel"].endswith("/cancel")
    assert body["links"]["result"] is None
    # The 202 came after the commit: another connection reads the job at once.
    read = await client.get(response.headers["location"], headers=keys.a)
    assert read.status_code == 200
    assert read.json()["id"] == body["id"]


async def test_status_follows_the_job_through_running_with_progress(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await create(client, keys.a)).json()["id"])
    attempt = await driver.claim(job_id)
    await driver.progress(job_id, attempt)
    body = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert body["state"] == "running"
    assert body["attempt"] == 1
    assert body["lease_expires_at"] is not None
    assert body["heartbeat_at"] is not None
    assert body["progress"]["stage"] == "validate"
    assert body["progress"]["plan_revision"] == 1
    assert body["progress"]["stages"] == [
        {"name": "validate", "unit": "checks", "done": 1, "total": 4},
        {"name": "build", "unit": "tiles", "done": 0, "total": 4},
    ]


async def test_failed_job_shows_error_and_no_result_link(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await create(client, keys.a)).json()["id"])
    await driver.fail(job_id)
    response = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    body = response.json()
    assert body["state"] == "failed"
    assert body["error"] == {
        "code": "cannot_build",
        "message": "summary-source cannot be built",
        "retryable": False,
        "evidence": None,
    }
    assert body["finished_at"] is not None
    assert body["links"]["result"] is None
    assert body["links"]["cancel"] is None
    assert "retry-after" not in response.headers  # terminal: nothing to poll for


async def test_cancel_queued_job_is_canceled_at_once(client: httpx.AsyncClient, keys: Keys) -> None:
    job_id = (await create(client, keys.a)).json()["id"]
    response = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert response.status_code == 202
    body = response.json()
    assert body["state"] == "canceled"
    assert body["cancel"]["requested_by"] == "client:alice"


async def test_cancel_running_job_is_requested_and_repeatable(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await create(client, keys.a)).json()["id"])
    await driver.claim(job_id)
    first = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert first.status_code == 202
    assert first.json()["state"] == "cancel_requested"
    again = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert again.status_code == 202
    assert again.json()["state"] == "cancel_requested"


async def test_cancel_after_publication_is_409_showing_the_winner_and_recorded(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await create(client, keys.a)).json()["id"])
    await driver.succeed(job_id, "alice", {"a.txt": b"A"})
    response = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"].endswith("cancel-too-late")
    assert problem["state"] == "succeeded"
    assert problem["delivery"] == "available"
    assert problem["job"]["links"]["result"].endswith("/result")
    history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()
    late = history["items"][-1]
    assert (late["from"], late["to"], late["reason"]) == (
        "succeeded",
        "succeeded",
        "cancel_too_late",
    )
    assert late["actor"] == "client:alice"


async def test_history_lists_every_transition_in_order(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = uuid.UUID((await create(client, keys.a, **{"X-Request-ID": "req-123"})).json()["id"])
    await driver.succeed(job_id, "alice", {"a.txt": b"A"})
    response = await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)
    assert response.status_code == 200
    items = response.json()["items"]
    moves = [(i["from"], i["to"], i["transition"]) for i in items]
    assert moves == [
        (None, "queued", "create"),
        ("queued", "running", "claim"),
        ("running", "succeeded", "publish"),
    ]
    assert [i["seq"] for i in items] == sorted(i["seq"] for i in items)
    created, claimed, published = items
    assert created["actor"] == "client:alice"
    assert created["event_id"] == "req-123"
    assert created["attempt"] is None
    assert claimed["attempt"] == 1
    assert claimed["attempt_id"] is not None
    assert published["attempt"] == 1
    assert published["reason"] == "published"
    after = await client.get(
        f"/v1/jobs/{job_id}/history", params={"after": items[0]["seq"]}, headers=keys.a
    )
    assert [i["seq"] for i in after.json()["items"]] == [claimed["seq"], published["seq"]]


async def test_list_filters_and_paginates_only_the_callers_jobs(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    mine = [(await create(client, keys.a)).json()["id"] for _ in range(5)]
    await create(client, keys.b)
    await client.post(f"/v1/jobs/{mine[0]}/cancel", headers=keys.a)

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/jobs", params=params, headers=keys.a)).json()
        assert len(page["items"]) <= 2
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(mine))  # newest first, no duplicates, nothing of bob's

    canceled = await client.get("/v1/jobs", params={"state": "canceled"}, headers=keys.a)
    assert [item["id"] for item in canceled.json()["items"]] == [mine[0]]
    queued = await client.get(
        "/v1/jobs", params={"state": "queued", "kind": "atlas.bundle"}, headers=keys.a
    )
    assert {item["id"] for item in queued.json()["items"]} == set(mine[1:])
    none = await client.get("/v1/jobs", params={"kind": "atlas.noop"}, headers=keys.a)
    assert none.json() == {"items": [], "next_cursor": None}
    too_big = await client.get("/v1/jobs", params={"limit": 1000}, headers=keys.a)
    assert too_big.status_code == 422
    bad_cursor = await client.get("/v1/jobs", params={"cursor": "nope"}, headers=keys.a)
    assert bad_cursor.status_code == 422


async def test_unknown_job_is_404_problem(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.get(f"/v1/jobs/{uuid.uuid4()}", headers=keys.a)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"].endswith("job-not-found")


async def test_states_in_status_body_are_the_lifecycle_vocabulary(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    body = (await create(client, keys.a)).json()
    assert JobState(body["state"]) is JobState.QUEUED
