"""Admission control on POST /v1/jobs: 429 per owner, 503 by queue age, both with
Retry-After and a problem body; an idempotent replay is never refused."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from tests.api.conftest import SIGNING_SECRET
from tests.api.support import BUNDLE_INPUT, Keys
from tests.support import atlas_process, free_port

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def client_for(settings: Settings, clock: Clock) -> AsyncIterator[httpx.AsyncClient]:
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as http:
            yield http


@pytest.fixture
async def limited(
    database_url: str, data_dir: Path, clock: Clock
) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret=SIGNING_SECRET,
        admission_max_active_per_owner=2,
        admission_max_queue_age_seconds=60,
    )
    async for http in client_for(settings, clock):
        yield http


def assert_refused(answer: httpx.Response, status: int, slug: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["type"].endswith(slug)
    assert int(answer.headers["retry-after"]) >= 1


async def test_owner_over_the_limit_gets_429_others_do_not(
    limited: httpx.AsyncClient, keys: Keys
) -> None:
    first = await limited.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k1"})
    assert first.status_code == 202
    assert (await limited.post("/v1/jobs", json=BUNDLE, headers=keys.a)).status_code == 202

    refused = await limited.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert_refused(refused, 429, "too-many-active-jobs")
    listed = await limited.get("/v1/jobs", headers=keys.a)
    assert len(listed.json()["items"]) == 2, "a refused request stores nothing"

    # Replaying an accepted request creates nothing, so it is never refused.
    replay = await limited.post(
        "/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k1"}
    )
    assert replay.status_code == 202
    assert replay.headers["idempotency-replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]

    # Another owner has its own budget; a finished job frees a place.
    assert (await limited.post("/v1/jobs", json=BUNDLE, headers=keys.b)).status_code == 202
    canceled = await limited.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=keys.a)
    assert canceled.json()["state"] == "canceled"
    assert (await limited.post("/v1/jobs", json=BUNDLE, headers=keys.a)).status_code == 202


async def test_a_backed_up_queue_gets_503_until_it_drains(
    limited: httpx.AsyncClient, keys: Keys, clock: Clock
) -> None:
    waiting = await limited.post("/v1/jobs", json=BUNDLE, headers=keys.b)
    assert waiting.status_code == 202
    clock.advance(61)  # the oldest claimable job has now waited past the limit
    assert_refused(
        await limited.post("/v1/jobs", json=BUNDLE, headers=keys.a), 503, "queue-backed-up"
    )
    await limited.post(f"/v1/jobs/{waiting.json()['id']}/cancel", headers=keys.b)
    assert (await limited.post("/v1/jobs", json=BUNDLE, headers=keys.a)).status_code == 202


async def test_admission_answers_over_real_http(
    engine: AsyncEngine, database_url: str, data_dir: Path, tmp_path: Path
) -> None:
    """The same 429 from a live ``atlas-jobs api`` process configured by environment."""
    async with engine.begin() as conn:
        key = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SIGNING_SECRET,
        "ATLAS_ADMISSION_MAX_ACTIVE_PER_OWNER": "1",
    }
    args = ["api", "--port", str(port)]
    with atlas_process(args, env=env, log_path=tmp_path / "api.log", ready_url=f"{url}/livez"):
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}
        ) as http:
            assert (await http.post("/v1/jobs", json=BUNDLE)).status_code == 202
            refused = await http.post("/v1/jobs", json=BUNDLE)
            assert_refused(refused, 429, "too-many-active-jobs")


async def test_concurrent_creations_never_overshoot_the_owner_cap(
    limited: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """A reliability finding: count-then-insert without a lock let concurrent creations all
    see room for one more. Under the owner's admission lock exactly the cap gets in."""
    async with engine.begin() as conn:
        key = await create_key(conn, owner="racer", roles=[Role.CLIENT])
    answers = await asyncio.gather(
        *(limited.post("/v1/jobs", json=BUNDLE, headers=Keys.header(key)) for _ in range(12))
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [202, 202] + [429] * 10, codes
