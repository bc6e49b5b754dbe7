"""``POST /v1/jobs:batch``: many jobs in one transaction and one creation statement,
each item validated like ``POST /v1/jobs`` and carrying its own optional idempotency key;
the same admission rules; all or nothing."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import queries
from atlas_jobs._app.db.schema import idempotency_keys, job_history, jobs
from atlas_jobs._app.settings import Settings
from tests.api.conftest import SIGNING_SECRET
from tests.api.support import BUNDLE_INPUT, Keys
from tests.api.test_errors_auth import assert_problem
from tests.api.test_round_trips import counting

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


def noop(tag: str, key: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"kind": "atlas.noop", "input": {"tag": tag}}
    if key is not None:
        item["idempotency_key"] = key
    return item


async def stored(engine: AsyncEngine) -> tuple[int, int, int]:
    """(jobs, history rows, idempotency keys) in the database."""
    async with engine.connect() as conn:
        return (
            int(await conn.scalar(select(func.count()).select_from(jobs)) or 0),
            int(await conn.scalar(select(func.count()).select_from(job_history)) or 0),
            int(await conn.scalar(select(func.count()).select_from(idempotency_keys)) or 0),
        )


def locs(body: dict[str, Any]) -> list[str]:
    return [".".join(error["loc"]) for error in body["errors"]]


async def test_a_batch_creates_every_job_with_history_in_one_statement(
    app: Any, client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    batch = {"jobs": [BUNDLE, noop("second"), noop("third")]}
    with counting(app) as trips:
        created = await client.post("/v1/jobs:batch", json=batch, headers=keys.a)
    assert created.status_code == 202, created.text
    items = created.json()["items"]
    assert [item["kind"] for item in items] == ["atlas.bundle", "atlas.noop", "atlas.noop"]
    assert all(item["state"] == "queued" and item["replayed"] is False for item in items)
    assert all(item["links"]["self"] == f"/v1/jobs/{item['id']}" for item in items)
    # Authentication, then ONE statement: admission (the owner's lock, the count under
    # it), jobs and history.
    creations = [s for s in trips.statements if s.startswith("WITH admission AS")]
    assert len(creations) == 1, trips.statements
    assert len(trips.statements) == 2, trips.statements
    assert await stored(engine) == (3, 3, 0)
    async with engine.connect() as conn:
        history = await conn.execute(
            select(job_history.c.job_id, job_history.c.transition, job_history.c.to_state)
        )
        recorded = {(row.job_id, row.transition, row.to_state) for row in history}
    assert recorded == {(uuid.UUID(item["id"]), "create", "queued") for item in items}
    for item in items:  # each one readable at its Location
        read = await client.get(item["links"]["self"], headers=keys.a)
        assert read.status_code == 200
        assert read.json()["id"] == item["id"]


async def test_one_invalid_item_is_422_naming_its_index_and_nothing_is_created(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    bad = {"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "pages": ["cover", "cover"]}}
    batch = {"jobs": [noop("a"), noop("b"), noop("c"), bad]}
    body = assert_problem(
        await client.post("/v1/jobs:batch", json=batch, headers=keys.a), 422, "invalid-input"
    )
    assert locs(body) == ["body.jobs.3.input.pages"]
    unknown = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop("a"), {"kind": "nope", "input": {}}]}, headers=keys.a
    )
    assert_problem(unknown, 422, "unknown-kind")
    nul = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop("a"), noop("x\u0000y")]}, headers=keys.a
    )
    assert locs(assert_problem(nul, 422, "invalid-input")) == ["body.jobs.1.input.tag"]
    empty = await client.post("/v1/jobs:batch", json={"jobs": []}, headers=keys.a)
    assert_problem(empty, 422, "invalid-request")
    assert await stored(engine) == (0, 0, 0)


async def test_replaying_a_batch_with_keys_returns_the_same_jobs(
    app: Any, client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    batch = {"jobs": [noop("a", "key-a"), noop("b"), noop("c", "key-c")]}
    first = await client.post("/v1/jobs:batch", json=batch, headers=keys.a)
    assert first.status_code == 202, first.text
    assert await stored(engine) == (3, 3, 2)
    # Replay: the keyed items are the same jobs (replayed); the unkeyed one is new.
    with counting(app) as trips:
        again = await client.post("/v1/jobs:batch", json=batch, headers=keys.a)
    assert again.status_code == 202, again.text
    before, after = first.json()["items"], again.json()["items"]
    assert [a["id"] == b["id"] for a, b in zip(before, after, strict=True)] == [True, False, True]
    assert [item["replayed"] for item in after] == [True, False, True]
    # ONE lock statement for both keys, ONE lookup, ONE admitted creation, no key row
    # (the key's lookup is cached since the first batch)
    assert len(trips.statements) == 3, trips.statements
    assert await stored(engine) == (4, 4, 2)
    # Only keyed items: nothing is created, so nothing is counted or refused.
    keyed = {"jobs": [noop("c", "key-c"), noop("a", "key-a")]}
    replay = await client.post("/v1/jobs:batch", json=keyed, headers=keys.a)
    assert [item["id"] for item in replay.json()["items"]] == [before[2]["id"], before[0]["id"]]
    # The same key is per owner: bob's key-a is his own job.
    bobs = await client.post("/v1/jobs:batch", json={"jobs": [noop("a", "key-a")]}, headers=keys.b)
    assert bobs.json()["items"][0]["replayed"] is False
    # The single route shares the keys: key-a with the same body is the same job.
    single = await client.post(
        "/v1/jobs", json=noop("a"), headers={**keys.a, "Idempotency-Key": "key-a"}
    )
    assert single.headers["Idempotency-Replayed"] == "true"
    assert single.json()["id"] == before[0]["id"]


async def test_a_key_reused_with_another_body_refuses_the_whole_batch(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    first = await client.post("/v1/jobs:batch", json={"jobs": [noop("a", "k")]}, headers=keys.a)
    assert first.status_code == 202
    reused = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop("fresh"), noop("other", "k")]}, headers=keys.a
    )
    body = assert_problem(reused, 422, "idempotency-key-reused")
    assert locs(body) == ["body.jobs.1.idempotency_key"]
    twice = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop("x", "dup"), noop("x", "dup")]}, headers=keys.a
    )
    assert locs(assert_problem(twice, 422, "invalid-request")) == ["body.jobs.1.idempotency_key"]
    assert await stored(engine) == (1, 1, 1)


async def test_a_key_held_by_a_request_in_flight_is_409(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    async with engine.begin() as other:  # another request holds "busy" until it commits
        assert await queries.try_idempotency_locks(other, "alice", ["busy"])
        held = await client.post(
            "/v1/jobs:batch", json={"jobs": [noop("a", "free"), noop("b", "busy")]}, headers=keys.a
        )
        assert_problem(held, 409, "idempotency-key-in-flight")
        assert int(held.headers["retry-after"]) >= 1
    assert await stored(engine) == (0, 0, 0)
    after = await client.post(
        "/v1/jobs:batch", json={"jobs": [noop("a", "free"), noop("b", "busy")]}, headers=keys.a
    )
    assert after.status_code == 202


@pytest.fixture
async def small(
    database_url: str, data_dir: Path, clock: Clock
) -> AsyncIterator[httpx.AsyncClient]:
    """An app allowing batches of 3 and 4 unfinished jobs per owner."""
    settings = Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret=SIGNING_SECRET,
        batch_max_jobs=3,
        admission_max_active_per_owner=4,
    )
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as http:
            yield http


async def test_over_the_batch_limit_is_a_413_problem(
    small: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    too_many = {"jobs": [noop(str(i)) for i in range(4)]}
    body = assert_problem(
        await small.post("/v1/jobs:batch", json=too_many, headers=keys.a), 413, "batch-too-large"
    )
    assert body["max_jobs"] == 3
    assert await stored(engine) == (0, 0, 0)


async def test_admission_counts_the_whole_batch(
    small: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    assert (await small.post("/v1/jobs", json=noop("one"), headers=keys.a)).status_code == 202
    assert (await small.post("/v1/jobs", json=noop("two"), headers=keys.a)).status_code == 202
    three = {"jobs": [noop("3", "k3"), noop("4"), noop("5")]}
    refused = await small.post("/v1/jobs:batch", json=three, headers=keys.a)
    assert_problem(refused, 429, "too-many-active-jobs")
    assert int(refused.headers["retry-after"]) >= 1
    assert await stored(engine) == (2, 2, 0)
    two = {"jobs": [noop("3", "k3"), noop("4")]}
    assert (await small.post("/v1/jobs:batch", json=two, headers=keys.a)).status_code == 202
    # Full now; a replay of the keyed item creates nothing, so it is not refused.
    replay = await small.post("/v1/jobs:batch", json={"jobs": [noop("3", "k3")]}, headers=keys.a)
    assert replay.status_code == 202
    assert replay.json()["items"][0]["replayed"] is True
    # Another owner has its own budget.
    assert (await small.post("/v1/jobs:batch", json=three, headers=keys.b)).status_code == 202


async def test_the_route_is_in_the_openapi_document(app: Any) -> None:
    spec = app.openapi()
    operation = spec["paths"]["/v1/jobs:batch"]["post"]
    assert operation["operationId"] == "jobs-batch"
    assert set(operation["responses"]) >= {"202", "409", "413", "422", "429"}
    assert "/v1/jobs/{job_id}" in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert schemas["JobBatchItemPublic"]["properties"]["replayed"]["description"]
    assert schemas["JobBatchCreate"]["description"]
