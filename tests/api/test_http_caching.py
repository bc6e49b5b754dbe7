"""ETag / If-None-Match / 304 and ``Prefer: wait`` woken by LISTEN/NOTIFY."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def test_etag_and_304_until_the_job_changes(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = (await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
    first = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    tag = first.headers["etag"]
    assert tag.startswith('W/"')
    assert first.headers["vary"] == "Prefer"

    unchanged = await client.get(f"/v1/jobs/{job_id}", headers={**keys.a, "If-None-Match": tag})
    assert unchanged.status_code == 304
    assert unchanged.content == b""
    assert unchanged.headers["etag"] == tag

    await driver.claim(uuid.UUID(job_id))
    changed = await client.get(f"/v1/jobs/{job_id}", headers={**keys.a, "If-None-Match": tag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != tag
    assert changed.json()["state"] == "running"


async def test_prefer_wait_returns_when_the_job_changes(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = (await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
    tag = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).headers["etag"]

    async def change_soon() -> None:
        await asyncio.sleep(0.3)
        await driver.claim(uuid.UUID(job_id))

    changer = asyncio.create_task(change_soon())
    held = await client.get(
        f"/v1/jobs/{job_id}",
        headers={**keys.a, "Prefer": "wait=60", "If-None-Match": tag},
    )
    await changer
    assert held.status_code == 200
    assert held.json()["state"] == "running"  # the read was held until the claim
    assert held.headers["preference-applied"] == "wait=5"  # capped by max_wait_seconds
    assert held.headers["vary"] == "Prefer"


async def test_prefer_wait_times_out_with_304_when_nothing_changes(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = (await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
    tag = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).headers["etag"]
    held = await client.get(
        f"/v1/jobs/{job_id}", headers={**keys.a, "Prefer": "wait=1", "If-None-Match": tag}
    )
    assert held.status_code == 304
    assert held.headers["preference-applied"] == "wait=1"


async def test_prefer_wait_does_not_hold_a_finished_job(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = (await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
    await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    read = await asyncio.wait_for(
        client.get(f"/v1/jobs/{job_id}", headers={**keys.a, "Prefer": "wait=5"}), timeout=4
    )
    assert read.status_code == 200
    assert read.json()["state"] == "canceled"


async def test_prefer_wait_is_an_integer_of_seconds_per_rfc_7240(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    """``wait=1e9`` was read as ``wait=1`` (the first digits); an unparsable value is
    now ignored, a huge one capped, and ``Preference-Applied`` says what was applied.
    (A finished job is never held: each read answers at once.)"""
    job_id = (await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
    await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    applied = {}
    for prefer in (
        "wait=1e9",
        "wait=-1",
        "wait=2.5",
        "wait=",
        "wait=99999999999999999999",
        'respond-async, WAIT="3"; x=y',
        "wait=2, wait=4",
    ):
        read = await client.get(f"/v1/jobs/{job_id}", headers={**keys.a, "Prefer": prefer})
        assert read.status_code == 200, (prefer, read.text)
        applied[prefer] = read.headers.get("preference-applied")
    assert applied == {
        "wait=1e9": None,
        "wait=-1": None,
        "wait=2.5": None,
        "wait=": None,
        "wait=99999999999999999999": "wait=5",  # capped at ATLAS_MAX_WAIT_SECONDS
        'respond-async, WAIT="3"; x=y': "wait=3",
        "wait=2, wait=4": "wait=2",  # only the first counts
    }
