"""Four-eyes reviews (``ATLAS_REVIEW_FOUR_EYES``): the holder who submitted a job may not
approve it, whichever of their keys they use; a key without a holder may not approve at
all; rejections are not restricted. Off by default."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.apikeys import Role, authenticate, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.reads import submitter_of
from atlas_jobs._app.settings import Settings
from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
FOUR_EYES = "urn:atlas-jobs:problem:four-eyes"


@dataclass
class Holders:
    dana: str  # submits (client + reviewer), holder "Dana"
    dana_other: str  # another key of Dana's (reviewer), holder spelled "dana"
    erin: str  # reviewer, holder "Erin"
    dana_id: uuid.UUID


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def api_settings(api_settings: Settings) -> Settings:
    return api_settings.model_copy(update={"review_four_eyes": True})


@pytest.fixture
async def holders(engine: AsyncEngine) -> Holders:
    async with engine.begin() as conn:
        dana = await create_key(
            conn, owner="alice", roles=[Role.CLIENT, Role.REVIEWER], holder="Dana"
        )
        other = await create_key(conn, owner="alice", roles=[Role.REVIEWER], holder=" dana ")
        erin = await create_key(conn, owner="alice", roles=[Role.REVIEWER], holder="Erin")
        principal = await authenticate(conn, dana)
    assert principal is not None
    assert principal.holder == "Dana"
    return Holders(dana, other, erin, principal.key_id)


async def waiting_job(
    client: httpx.AsyncClient, driver: Driver, key: str, headers: dict[str, str] | None = None
) -> str:
    made = await client.post("/v1/jobs", json=BUNDLE, headers={**bearer(key), **(headers or {})})
    assert made.status_code == 202, made.text
    await driver.await_review(uuid.UUID(made.json()["id"]))
    return str(made.json()["id"])


async def review(client: httpx.AsyncClient, job_id: str, key: str, decision: str) -> httpx.Response:
    return await client.post(
        f"/v1/jobs/{job_id}/review", json={"decision": decision}, headers=bearer(key)
    )


async def test_the_submitting_holder_may_not_approve_with_any_of_their_keys(
    client: httpx.AsyncClient, driver: Driver, holders: Holders, keys: Keys
) -> None:
    job = await waiting_job(client, driver, holders.dana)
    for key in (holders.dana, holders.dana_other):
        refused = await review(client, job, key, "approve")
        assert refused.status_code == 403, refused.text
        problem = refused.json()
        assert problem["type"] == FOUR_EYES
        assert "Dana" in problem["detail"]
        assert refused.headers["content-type"] == "application/problem+json"
    nameless = await review(client, job, keys.reviewer, "approve")  # a key without a holder
    assert nameless.status_code == 403
    assert nameless.json()["type"] == FOUR_EYES
    status = (await client.get(f"/v1/jobs/{job}", headers=bearer(holders.dana))).json()
    assert (status["state"], status["reason"]) == ("waiting", "review")  # nothing written
    approved = await review(client, job, holders.erin, "approve")
    assert approved.status_code == 202, approved.text
    assert approved.json()["reason"] == "review_approved"


async def test_the_submitter_may_still_reject_and_other_states_answer_as_before(
    client: httpx.AsyncClient, driver: Driver, holders: Holders
) -> None:
    job = await waiting_job(client, driver, holders.dana)
    rejected = await review(client, job, holders.dana_other, "reject")
    assert rejected.status_code == 202, rejected.text
    assert rejected.json()["state"] == "failed"
    late = await review(client, job, holders.dana, "approve")  # not waiting any more
    assert late.status_code == 409


async def test_every_way_of_creating_records_the_submitting_key(
    client: httpx.AsyncClient, driver: Driver, holders: Holders, engine: AsyncEngine
) -> None:
    keyed = await waiting_job(client, driver, holders.dana, {"Idempotency-Key": "k-1"})
    batch = await client.post(
        "/v1/jobs:batch", json={"jobs": [BUNDLE]}, headers=bearer(holders.dana)
    )
    assert batch.status_code == 202, batch.text
    batched = batch.json()["items"][0]["id"]
    async with engine.connect() as conn:
        for job in (keyed, batched):
            submitter = await submitter_of(conn, uuid.UUID(job))
            assert submitter is not None
            assert (submitter.key_id, submitter.holder) == (holders.dana_id, "Dana")
    refused = await review(client, keyed, holders.dana_other, "approve")
    assert refused.json()["type"] == FOUR_EYES


async def test_four_eyes_is_off_by_default(
    api_settings: Settings, driver: Driver, holders: Holders
) -> None:
    assert Settings.model_fields["review_four_eyes"].default is False
    plain = create_app(api_settings.model_copy(update={"review_four_eyes": False}), clock=Clock())
    async with plain.router.lifespan_context(plain):
        transport = httpx.ASGITransport(app=plain)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            job = await waiting_job(client, driver, holders.dana)
            assert (await review(client, job, holders.dana, "approve")).status_code == 202
