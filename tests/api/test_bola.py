"""BOLA matrix: another owner's job id answers 404 exactly like an unknown id, on every
route, and nothing changes (no state, no history, no version bump)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import func, select

from atlas_jobs._app.db.schema import job_history
from tests.api.support import BUNDLE_INPUT, Driver, Keys

ROUTES = [
    ("GET", "/v1/jobs/{id}", None),
    ("GET", "/v1/jobs/{id}/history", None),
    ("GET", "/v1/jobs/{id}/events", None),
    ("GET", "/v1/jobs/{id}/result", None),
    ("POST", "/v1/jobs/{id}/cancel", None),
    # Role-gated routes answer 403 before looking at the id: identical for both ids too.
    ("POST", "/v1/jobs/{id}/review", {"decision": "reject", "note": "mine now"}),
    ("POST", "/v1/jobs/{id}/resume", None),
    ("POST", "/v1/jobs/{id}/fail", None),
    ("POST", "/v1/jobs/{id}/replay", None),
]


def comparable(response: httpx.Response) -> tuple[int, str, dict[str, object]]:
    body = response.json()
    return response.status_code, response.headers["content-type"], body


@pytest.mark.parametrize("succeeded", [False, True], ids=["queued", "succeeded"])
async def test_second_owner_gets_404_like_unknown_on_every_route_and_nothing_changes(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, succeeded: bool
) -> None:
    created = await client.post(
        "/v1/jobs", json={"kind": "atlas.bundle", "input": BUNDLE_INPUT}, headers=keys.a
    )
    job_id = uuid.UUID(created.json()["id"])
    if succeeded:
        await driver.succeed(job_id, "alice", {"bundle.zip": b"zip"})
    before = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    async with driver.engine.connect() as conn:
        history_before = await conn.scalar(
            select(func.count()).where(job_history.c.job_id == job_id)
        )

    unknown = uuid.uuid4()
    for method, template, body in ROUTES:
        theirs = await client.request(method, template.format(id=job_id), json=body, headers=keys.b)
        missing = await client.request(
            method, template.format(id=unknown), json=body, headers=keys.b
        )
        assert theirs.status_code in {403, 404}, (method, template, theirs.text)
        assert comparable(theirs) == comparable(missing), (method, template)
        assert str(job_id) not in theirs.text

    # Not listed either, and a replayed Idempotency-Key of alice's is bob's own key.
    listing = await client.get("/v1/jobs", headers=keys.b)
    assert listing.json()["items"] == []

    after = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert after == before
    async with driver.engine.connect() as conn:
        history_after = await conn.scalar(
            select(func.count()).where(job_history.c.job_id == job_id)
        )
    assert history_after == history_before

    if succeeded:  # alice's signed URL still works for alice's file; bob got nothing
        result = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
        assert result.status_code == 200


async def test_idempotency_keys_are_scoped_per_owner(client: httpx.AsyncClient, keys: Keys) -> None:
    body = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
    first = await client.post("/v1/jobs", json=body, headers={**keys.a, "Idempotency-Key": "k1"})
    second = await client.post("/v1/jobs", json=body, headers={**keys.b, "Idempotency-Key": "k1"})
    assert first.status_code == second.status_code == 202
    assert first.json()["id"] != second.json()["id"]
    assert "idempotency-replayed" not in second.headers
