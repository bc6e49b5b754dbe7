"""Tags on creation and the job search of ``GET /v1/jobs``: every filter, the owner
scope of each role, paging under inserts, and the 422s of a bad filter."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from tests.api.support import Driver, Keys


async def make(
    client: httpx.AsyncClient, auth: dict[str, str], tags: list[str] | None = None, **extra: Any
) -> httpx.Response:
    body: dict[str, Any] = {"kind": "atlas.noop", "input": {}} | extra
    if tags is not None:
        body["tags"] = tags
    return await client.post("/v1/jobs", json=body, headers=auth)


BUNDLE: dict[str, Any] = {
    "kind": "atlas.bundle",
    "input": {"preset": "coast", "pages": ["cover"], "format": "text-bundle-v1"},
}


def ids(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def test_tags_are_stored_sorted_returned_and_covered_by_idempotency(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    created = await make(client, keys.a, ["team=maps", "customer=acme"])
    assert created.status_code == 202, created.text
    assert created.json()["tags"] == ["customer=acme", "team=maps"]
    read = await client.get(f"/v1/jobs/{created.json()['id']}", headers=keys.a)
    assert read.json()["tags"] == ["customer=acme", "team=maps"]
    assert (await make(client, keys.a)).json()["tags"] == []

    key = {**keys.a, "Idempotency-Key": "tagged-1"}
    first = await make(client, key, ["a=1"])
    again = await make(client, key, ["a=1"])
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotency-Replayed"] == "true"
    other = await make(client, key, ["a=2"])
    assert other.status_code == 422
    assert other.json()["type"].endswith("idempotency-key-reused")

    batch = await client.post(
        "/v1/jobs:batch",
        json={
            "jobs": [
                {"kind": "atlas.noop", "input": {}, "tags": ["b=1", "a=1"]},
                {"kind": "atlas.noop", "input": {}},
                {"kind": "atlas.noop", "input": {}, "tags": ["c=3"]},
            ]
        },
        headers=keys.a,
    )
    assert [item["tags"] for item in batch.json()["items"]] == [["a=1", "b=1"], [], ["c=3"]]


@pytest.mark.parametrize(
    ("tags", "loc"),
    [
        (["nokey"], ["body", "tags", 0]),
        (["ok=1", "=value"], ["body", "tags", 1]),
        (["k=" + "v" * 100], ["body", "tags", 0]),
        (["k=line\nbreak"], ["body", "tags", 0]),
        ([f"k{i}=v" for i in range(11)], ["body", "tags"]),
        (["a=1", "b=2", "a=1"], ["body", "tags", 2]),
    ],
)
async def test_a_bad_tag_is_422_naming_it(
    client: httpx.AsyncClient, keys: Keys, tags: list[str], loc: list[Any]
) -> None:
    response = await make(client, keys.a, tags)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    wanted = [str(part) for part in loc]
    assert any(error["loc"][: len(wanted)] == wanted for error in response.json()["errors"])


async def test_a_bad_tag_in_a_batch_names_the_item(client: httpx.AsyncClient, keys: Keys) -> None:
    response = await client.post(
        "/v1/jobs:batch",
        json={"jobs": [{"kind": "atlas.noop", "input": {}, "tags": ["x=1", "x=1"]}]},
        headers=keys.a,
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "jobs", "0", "tags", "1"]


async def test_every_filter_selects_its_jobs(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    stuck = (await make(client, keys.a, ["batch=8"], **BUNDLE)).json()["id"]
    await driver.unresolve(uuid.UUID(stuck))
    failed = (await make(client, keys.a, **BUNDLE)).json()["id"]
    await driver.fail(uuid.UUID(failed))
    noop = (await make(client, keys.a, ["batch=7", "team=maps"])).json()["id"]
    bundle = (await make(client, keys.a, ["batch=7"], **BUNDLE)).json()["id"]
    bobs = (await make(client, keys.b, ["batch=7"])).json()["id"]

    async def search(auth: dict[str, str], **params: Any) -> list[str]:
        return ids(await client.get("/v1/jobs", params=params, headers=auth))

    assert await search(keys.a, tag="batch=7") == [bundle, noop]
    assert await search(keys.a, tag=["batch=7", "team=maps"]) == [noop]
    assert await search(keys.a, kind="atlas.bundle") == [bundle, failed, stuck]
    assert await search(keys.a, kind="atlas.bundle", state="queued") == [bundle]
    assert await search(keys.a, state="unresolved") == [stuck]
    assert await search(keys.a, state=["unresolved", "failed"]) == [failed, stuck]
    assert await search(keys.a, reason="retries_exhausted") == [stuck]
    assert await search(keys.a, error_code="flaky") == [stuck]
    assert await search(keys.a, error_code="cannot_build") == [failed]
    # operators search every owner; an owner filter narrows it
    assert await search(keys.op, tag="batch=7") == [bobs, bundle, noop]
    assert await search(keys.op, tag="batch=7", owner="bob") == [bobs]
    assert await search(keys.op, owner=["bob", "alice"], state="unresolved") == [stuck]

    async with engine.begin() as conn:  # spread creation and finishing over time
        await conn.execute(
            text("UPDATE jobs SET created_at = created_at - interval '2 days' WHERE id = :id"),
            {"id": noop},
        )
    now = datetime.now(UTC)
    day_ago = (now - timedelta(days=1)).isoformat()
    assert await search(keys.a, created_before=day_ago) == [noop]
    assert noop not in await search(keys.a, created_after=day_ago)
    finished = await search(keys.a, finished_after=day_ago)
    assert finished == [failed]
    assert await search(keys.a, finished_before=day_ago) == []
    assert await search(
        keys.a,
        created_after=(now - timedelta(days=3)).isoformat(),
        created_before=day_ago,
    ) == [noop]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"colour": "blue"}, "colour"),
        ({"state": "sleeping"}, "state"),
        ({"reason": "whim"}, "reason"),
        ({"tag": "no-equals"}, "tag"),
        ({"created_after": "yesterday"}, "created_after"),
        ({"created_after": "2026-12-01T00:00:00"}, "created_after"),  # no time zone
        (
            {"created_after": "2026-12-02T00:00:00Z", "created_before": "2026-12-01T00:00:00Z"},
            "created_before",
        ),
        (
            {"finished_after": "2026-12-01T00:00:00Z", "finished_before": "2026-12-01T00:00:00Z"},
            "finished_before",
        ),
        ({"limit": 0}, "limit"),
        ({"cursor": "x1"}, "cursor"),
        ({"cursor": "42"}, "cursor"),
        ({"cursor": "i" + "0" * 31}, "cursor"),
        ({"cursor": "i" + "G" * 32}, "cursor"),
        # well formed, but one owner's cursor (by seq) for a search across owners (by id)
        ({"cursor": "c42"}, "cursor"),
        ({"owner": "alice", "cursor": "i" + "0" * 32}, "cursor"),
    ],
)
async def test_a_bad_filter_is_422_naming_the_field(
    client: httpx.AsyncClient, keys: Keys, params: dict[str, str], field: str
) -> None:
    response = await client.get("/v1/jobs", params=params, headers=keys.op)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert [field] in [error["loc"][1:2] for error in response.json()["errors"]]


async def test_clients_search_only_their_own_and_reviewers_by_their_scope(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    alices = (await make(client, keys.a, ["x=1"])).json()["id"]
    bobs = (await make(client, keys.b, ["x=1"])).json()["id"]
    assert ids(await client.get("/v1/jobs", params={"tag": "x=1"}, headers=keys.a)) == [alices]
    assert ids(await client.get("/v1/jobs", params={"owner": "alice"}, headers=keys.a)) == [alices]
    other = await client.get("/v1/jobs", params={"owner": "bob"}, headers=keys.a)
    assert other.status_code == 403
    assert other.json()["type"].endswith("forbidden")
    # the default review scope: a reviewer searches its own owner's jobs
    assert ids(await client.get("/v1/jobs", headers=keys.rev)) == [alices]
    assert (
        await client.get("/v1/jobs", params={"owner": "bob"}, headers=keys.rev)
    ).status_code == 403
    assert bobs in ids(await client.get("/v1/jobs", headers=keys.op))
    async with engine.begin() as conn:
        viewer = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    assert ids(await client.get("/v1/jobs", headers=Keys.header(viewer))) == []


async def test_a_global_review_scope_lets_reviewers_search_every_owner(
    api_settings: Settings, clock: Clock, keys: Keys, engine: AsyncEngine
) -> None:
    """With ``ATLAS_REVIEW_SCOPE=global`` a reviewer searches every owner's jobs, as an
    operator does (an owner filter narrows it, the walk pages across owners); clients
    still search only their own."""
    async with engine.begin() as conn:
        bobs_reviewer = await create_key(conn, owner="bob", roles=[Role.REVIEWER])
        carol = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    app = create_app(api_settings.model_copy(update={"review_scope": "global"}), clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        alices = (await make(client, keys.a, ["x=1"])).json()["id"]
        bobs = (await make(client, keys.b, ["x=1"])).json()["id"]
        carols = (await make(client, Keys.header(carol), ["x=2"])).json()["id"]

        for reviewer in (keys.rev, Keys.header(bobs_reviewer)):  # alice's and bob's
            assert ids(await client.get("/v1/jobs", headers=reviewer)) == [carols, bobs, alices]
            assert ids(await client.get("/v1/jobs", params={"tag": "x=1"}, headers=reviewer)) == [
                bobs,
                alices,
            ]
            assert ids(
                await client.get("/v1/jobs", params={"owner": ["carol", "alice"]}, headers=reviewer)
            ) == [carols, alices]
        seen: list[str] = []
        cursor = None
        while True:  # paging across owners, one job a page
            params: dict[str, Any] = {"limit": 1, **({"cursor": cursor} if cursor else {})}
            page = await client.get("/v1/jobs", params=params, headers=keys.rev)
            seen += ids(page)
            cursor = page.json()["next_cursor"]
            if cursor is None:
                break
        assert seen == [carols, bobs, alices]

        # clients keep their own, whatever the review scope
        assert ids(await client.get("/v1/jobs", headers=keys.a)) == [alices]
        other = await client.get("/v1/jobs", params={"owner": "bob"}, headers=keys.a)
        assert other.status_code == 403
        assert other.json()["type"].endswith("forbidden")


async def test_paging_across_owners_is_stable_under_inserts(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    made = [
        (await make(client, keys.a if i % 2 else keys.b, ["run=p"])).json()["id"] for i in range(7)
    ]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, "tag": "run=p"}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/jobs", params=params, headers=keys.op)).json()
        seen += [item["id"] for item in page["items"]]
        await make(client, keys.a, ["run=p"])  # a newer job between pages
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(made))


async def test_paging_every_owner_by_id_sees_each_job_once_under_inserts(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """Across owners the cursor is the id walk's (``i...``): paging through every job of
    two owners while both keep creating jobs between pages shows each job that existed
    at the first page exactly once, newest first, and none created later."""
    made = [(await make(client, keys.a if i % 3 else keys.b)).json()["id"] for i in range(23)]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 4}
        if cursor:
            params["cursor"] = cursor
        response = await client.get("/v1/jobs", params=params, headers=keys.op)
        assert response.status_code == 200, response.text
        page = response.json()
        seen += [item["id"] for item in page["items"]]
        await make(client, keys.a)  # newer jobs of both owners between pages
        await make(client, keys.b)
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor.startswith("i"), cursor
    assert seen == list(reversed(made))

    # one owner's search (the caller's own, or an operator's filter on one owner) keeps
    # the seq walk, and its cursor says so
    own = (await client.get("/v1/jobs", params={"limit": 2}, headers=keys.a)).json()
    assert own["next_cursor"].startswith("c")
    one = await client.get("/v1/jobs", params={"limit": 2, "owner": "bob"}, headers=keys.op)
    assert one.json()["next_cursor"].startswith("c")
    again = await client.get(
        "/v1/jobs",
        params={"limit": 2, "owner": "bob", "cursor": one.json()["next_cursor"]},
        headers=keys.op,
    )
    assert again.status_code == 200
    assert not {i["id"] for i in again.json()["items"]} & {i["id"] for i in one.json()["items"]}


async def test_a_tag_search_across_owners_pages_newest_first_each_job_once(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """A tag search across owners walks the tag's jobs by id: paging through them while
    both owners keep creating jobs (tagged, untagged, other tags, batches) between pages
    shows each tagged job that existed at the first page exactly once, newest first; a
    second tag narrows the walk, and one owner's tag search keeps the seq walk."""
    made: list[str] = []
    for i in range(11):
        auth = keys.a if i % 3 else keys.b
        tags = ["run=q", "team=x"] if i % 2 else ["run=q"]
        made.append((await make(client, auth, tags)).json()["id"])
        await make(client, auth, ["run=other"])
        await make(client, auth)
    batch = await client.post(
        "/v1/jobs:batch",
        json={
            "jobs": [
                {"kind": "atlas.noop", "input": {}, "tags": ["run=q"]},
                {"kind": "atlas.noop", "input": {}},
                {"kind": "atlas.noop", "input": {}, "tags": ["team=x", "run=q"]},
            ]
        },
        headers=keys.b,
    )
    assert batch.status_code == 202, batch.text
    made += [batch.json()["items"][0]["id"], batch.json()["items"][2]["id"]]
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 3, "tag": "run=q"}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/jobs", params=params, headers=keys.op)).json()
        seen += [item["id"] for item in page["items"]]
        assert all("run=q" in item["tags"] for item in page["items"])
        await make(client, keys.a, ["run=q"])  # newer jobs of both owners between pages
        await make(client, keys.b, ["run=q", "team=x"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert cursor.startswith("i"), cursor
    assert seen == list(reversed(made))
    assert len(set(seen)) == len(made) == 13

    both = await client.get(
        "/v1/jobs", params=[("tag", "run=q"), ("tag", "team=x"), ("limit", 100)], headers=keys.op
    )
    assert all({"run=q", "team=x"} <= set(item["tags"]) for item in both.json()["items"])
    assert set(made[1::2][:5]) <= set(ids(both))
    alone = await client.get(
        "/v1/jobs", params={"tag": "run=q", "owner": "bob", "limit": 2}, headers=keys.op
    )
    assert alone.json()["next_cursor"].startswith("c")
    assert all("run=q" in item["tags"] for item in alone.json()["items"])
