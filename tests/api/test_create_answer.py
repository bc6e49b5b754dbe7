"""The 202 of a creation is the job's status as a read right after it shows it:
built from the status columns the creation statement answers (``JOB_STATUS_COLUMNS``),
not the whole row, it is the same body -- and the same ETag -- as ``GET`` answers, for
one job, one job with a key (its own statement) and a batch."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.support import BUNDLE_INPUT, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
NOOP = {"kind": "atlas.noop", "input": {"tag": "t"}}


async def read(client: httpx.AsyncClient, keys: Keys, job_id: str) -> httpx.Response:
    answer = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    assert answer.status_code == 200, answer.text
    return answer


async def assert_answered_as_read(
    client: httpx.AsyncClient, keys: Keys, created: httpx.Response
) -> dict[str, Any]:
    assert created.status_code == 202, created.text
    body: dict[str, Any] = created.json()
    got = await read(client, keys, body["id"])
    assert body == got.json()
    assert created.headers["ETag"] == got.headers["ETag"]
    assert created.headers["Location"] == f"/v1/jobs/{body['id']}"
    return body


async def test_the_202_of_one_job_is_the_status_a_read_shows(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    body = await assert_answered_as_read(
        client, keys, await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    )
    assert (body["state"], body["reason"], body["kind"]) == ("queued", "new", "atlas.bundle")


async def test_the_202_of_a_keyed_job_and_of_its_replay_is_the_status_a_read_shows(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    keyed = {**keys.a, "Idempotency-Key": "answer-1"}
    first = await client.post("/v1/jobs", json=BUNDLE, headers=keyed)
    body = await assert_answered_as_read(client, keys, first)
    again = await client.post("/v1/jobs", json=BUNDLE, headers=keyed)
    assert again.headers["Idempotency-Replayed"] == "true"
    assert await assert_answered_as_read(client, keys, again) == body


async def test_each_item_of_a_batch_is_the_status_a_read_shows(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    batch = {"jobs": [BUNDLE, NOOP, {**NOOP, "idempotency_key": "answer-2"}]}
    created = await client.post("/v1/jobs:batch", json=batch, headers=keys.a)
    assert created.status_code == 202, created.text
    items = created.json()["items"]
    assert [item["kind"] for item in items] == ["atlas.bundle", "atlas.noop", "atlas.noop"]
    for item in items:
        assert item.pop("replayed") is False
        assert item == (await read(client, keys, item["id"])).json()
