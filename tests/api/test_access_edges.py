"""Reliability findings and the retention boundary (docs/protocol.md §6): who may act,
what outlives what, and a history that neither grows without bound nor gets cut."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.apikeys import Role, create_key, revoke_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import job_history
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.signing import DownloadSigner
from tests.api.conftest import SIGNING_SECRET
from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
FILES = {"bundle.zip": b"PK\x05\x06" + b"\x00" * 18}


async def new_job(client: httpx.AsyncClient, keys: Keys) -> uuid.UUID:
    response = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert response.status_code == 202, response.text
    return uuid.UUID(response.json()["id"])


async def test_download_links_die_with_the_key_that_asked_for_them(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    url = (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).json()["files"][0]["url"]
    assert (await client.get(url)).status_code == 200
    grant = DownloadSigner(SIGNING_SECRET, ttl_seconds=60).verify(url.rsplit("/", 1)[1])
    async with engine.begin() as conn:
        assert await revoke_key(conn, grant.key_id)
    gone = await client.get(url)
    assert gone.status_code == 410
    assert gone.json()["type"].endswith("download-gone")


async def test_retention_holds_at_the_boundary_before_any_sweep(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, clock: Clock
) -> None:
    """docs/protocol.md §6: from expires_at on, the result and its URLs answer 410 and the
    status shows the delivery expired, whatever the sweeper has done yet (nothing, here)."""
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)  # retained 60 s
    url = (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).json()["files"][0]["url"]
    clock.advance(59)  # one second before expires_at: still there
    assert (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).status_code == 200
    assert (await client.get(url)).status_code == 200
    clock.advance(2)  # one second after expires_at; no sweeper runs in this test
    status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert (status["state"], status["delivery"]["state"]) == ("succeeded", "expired")
    assert status["links"]["result"] is None
    assert (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).status_code == 410
    assert (await client.get(url)).status_code == 410
    listed = (await client.get("/v1/jobs", headers=keys.a)).json()["items"]
    assert [item["delivery"]["state"] for item in listed if item["id"] == str(job_id)] == [
        "expired"
    ]


async def test_a_reviewer_decides_its_own_owners_jobs_only(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    """Another owner's job is 404 to a reviewer, exactly like an unknown one (no 409 that
    would reveal it exists), and the job is untouched."""
    async with engine.begin() as conn:
        bobs_reviewer = await create_key(conn, owner="bob", roles=[Role.REVIEWER])
    job_id = await new_job(client, keys)
    await driver.await_review(job_id)
    for decision in ("approve", "reject"):
        response = await client.post(
            f"/v1/jobs/{job_id}/review",
            json={"decision": decision},
            headers=Keys.header(bobs_reviewer),
        )
        assert response.status_code == 404, response.text
    unknown = await client.post(
        f"/v1/jobs/{uuid.uuid4()}/review", json={"decision": "approve"}, headers=keys.rev
    )
    assert unknown.status_code == 404
    assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()["state"] == "waiting"
    mine = await client.post(
        f"/v1/jobs/{job_id}/review", json={"decision": "approve"}, headers=keys.rev
    )
    assert mine.status_code == 202
    assert mine.json()["state"] == "queued"


async def test_a_global_review_scope_lets_reviewers_act_across_owners(
    api_settings: Settings, clock: Clock, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        bobs_reviewer = await create_key(conn, owner="bob", roles=[Role.REVIEWER])
    app = create_app(api_settings.model_copy(update={"review_scope": "global"}), clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        job_id = await new_job(client, keys)
        await driver.await_review(job_id)
        response = await client.post(
            f"/v1/jobs/{job_id}/review",
            json={"decision": "reject", "note": "no"},
            headers=Keys.header(bobs_reviewer),
        )
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "failed"


@pytest.mark.parametrize("token", [None, "metrics-secret"])
async def test_metrics_can_be_put_behind_a_token(
    api_settings: Settings, clock: Clock, data_dir: Path, token: str | None
) -> None:
    app: FastAPI = create_app(api_settings.model_copy(update={"metrics_token": token}), clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        anonymous = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
        right = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    if token is None:
        assert anonymous.status_code == 200
        return
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert wrong.status_code == 401
    assert right.status_code == 200
    assert "atlas" in right.text


async def test_repeated_late_cancels_are_recorded_once_with_a_count(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    for _ in range(5):
        response = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
        assert response.status_code == 409
    operator = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.op)
    assert operator.status_code == 409
    items = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()["items"]
    late = [(i["actor"], i["count"]) for i in items if i["reason"] == "cancel_too_late"]
    assert late == [("client:alice", 5), ("operator:ops", 1)]
    async with engine.connect() as conn:
        rows = await conn.scalar(
            select(func.count()).select_from(job_history).where(job_history.c.job_id == job_id)
        )
    assert rows == len(items)


async def test_history_pages_with_a_cursor_instead_of_cutting(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    everything = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()
    assert everything["next_after"] is None
    total = len(everything["items"])
    assert total >= 3  # create, claim, publish
    seen: list[int] = []
    after = 0
    while True:
        page = (
            await client.get(
                f"/v1/jobs/{job_id}/history", params={"after": after, "limit": 2}, headers=keys.a
            )
        ).json()
        seen += [item["seq"] for item in page["items"]]
        if page["next_after"] is None:
            break
        assert len(page["items"]) == 2
        after = page["next_after"]
    assert seen == [item["seq"] for item in everything["items"]]
