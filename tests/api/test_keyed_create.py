"""The keyed creation in one statement (``CREATE_KEYED``, ``Transitions.create_keyed``):
the Idempotency-Key protocol of docs/protocol.md §4 holds on this path too -- one job per
key under concurrency, 409 while the key is in flight, 422 for another body, replays
never refused by admission, a refused key not stored -- and admission stays exact."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.settings import Settings
from tests.api.conftest import SIGNING_SECRET
from tests.api.support import BUNDLE_INPUT, Keys
from tests.api.test_admission import client_for

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


@pytest.fixture
async def capped(
    database_url: str, data_dir: Path, clock: Clock
) -> AsyncIterator[httpx.AsyncClient]:
    """A cap of 2 per owner and no queue-age check: keyed creations take the one-statement
    path (a queue-age check sends them to the transactional one)."""
    settings = Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret=SIGNING_SECRET,
        admission_max_active_per_owner=2,
    )
    async for http in client_for(settings, clock):
        yield http


async def stored(engine: AsyncEngine, owner: str) -> tuple[int, int]:
    """(jobs, idempotency key rows) of the owner."""
    async with engine.connect() as conn:
        jobs = await conn.scalar(text("SELECT count(*) FROM jobs WHERE owner = :o"), {"o": owner})
        rows = await conn.scalar(
            text("SELECT count(*) FROM idempotency_keys WHERE owner = :o"), {"o": owner}
        )
    return int(jobs or 0), int(rows or 0)


async def test_concurrent_same_key_creations_make_one_job(
    capped: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    """20 concurrent requests with one key: one job, one key row; every 202 names it
    (one original, the rest replayed), the others are 409 in flight."""
    headers = {**keys.a, "Idempotency-Key": "race-1"}
    answers = await asyncio.gather(
        *(capped.post("/v1/jobs", json=BUNDLE, headers=headers) for _ in range(20))
    )
    assert {a.status_code for a in answers} <= {202, 409}, [a.text for a in answers]
    accepted = [a for a in answers if a.status_code == 202]
    assert len({a.json()["id"] for a in accepted}) == 1
    assert len([a for a in accepted if "idempotency-replayed" not in a.headers]) == 1
    for conflict in (a for a in answers if a.status_code == 409):
        assert conflict.json()["type"].endswith("idempotency-key-in-flight")
    assert await stored(engine, "alice") == (1, 1)


async def test_a_key_held_in_flight_is_409_and_creates_nothing(
    capped: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    """While another transaction holds the key's in-flight lock the statement writes
    nothing and the answer is 409 + Retry-After; once released the key creates."""
    headers = {**keys.a, "Idempotency-Key": "held"}
    async with engine.begin() as holder:
        await holder.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended('alice:held', 0))")
        )
        busy = await capped.post("/v1/jobs", json=BUNDLE, headers=headers)
        assert busy.status_code == 409, busy.text
        assert busy.headers["content-type"].startswith("application/problem+json")
        assert int(busy.headers["retry-after"]) >= 1
        assert await stored(engine, "alice") == (0, 0)
    created = await capped.post("/v1/jobs", json=BUNDLE, headers=headers)
    assert created.status_code == 202, created.text
    assert "idempotency-replayed" not in created.headers


async def test_another_body_is_422_and_a_replay_at_the_cap_is_not_refused(
    capped: httpx.AsyncClient, keys: Keys, engine: AsyncEngine
) -> None:
    first = await capped.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k1"})
    assert first.status_code == 202, first.text
    other = {"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "preset": "reef"}}
    reused = await capped.post("/v1/jobs", json=other, headers={**keys.a, "Idempotency-Key": "k1"})
    assert reused.status_code == 422, reused.text
    assert reused.json()["type"].endswith("idempotency-key-reused")
    second = await capped.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert second.status_code == 202, second.text  # the cap (2) is now full

    # At the cap: a replay creates nothing, so it is answered; a new key is refused and
    # NOT stored -- once a place frees, the same key creates a job (not a replay).
    replay = await capped.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k1"})
    assert replay.status_code == 202, replay.text
    assert replay.headers["idempotency-replayed"] == "true"
    assert replay.json()["id"] == first.json()["id"]
    refused = await capped.post(
        "/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k2"}
    )
    assert refused.status_code == 429, refused.text
    assert await stored(engine, "alice") == (2, 1)
    await capped.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=keys.a)
    later = await capped.post("/v1/jobs", json=BUNDLE, headers={**keys.a, "Idempotency-Key": "k2"})
    assert later.status_code == 202, later.text
    assert "idempotency-replayed" not in later.headers
    assert await stored(engine, "alice") == (3, 2)


async def test_concurrent_keyed_creations_never_overshoot_the_owner_cap(
    capped: httpx.AsyncClient, engine: AsyncEngine
) -> None:
    """12 concurrent creations with distinct keys against a cap of 2: exactly two jobs,
    two key rows; the refused keys are not stored."""
    async with engine.begin() as conn:
        key = await create_key(conn, owner="racer", roles=[Role.CLIENT])
    answers = await asyncio.gather(
        *(
            capped.post(
                "/v1/jobs", json=BUNDLE, headers={**Keys.header(key), "Idempotency-Key": f"r{i}"}
            )
            for i in range(12)
        )
    )
    codes = sorted(a.status_code for a in answers)
    assert codes == [202, 202] + [429] * 10, codes
    assert await stored(engine, "racer") == (2, 2)
