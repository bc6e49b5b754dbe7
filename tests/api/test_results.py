"""Result reference and signed downloads: 200 only when available, 409/410 otherwise."""

from __future__ import annotations

import hashlib
import time
import uuid

import httpx
import pytest

from atlas_jobs._app.signing import DownloadGrant, DownloadSigner
from tests.api.conftest import SIGNING_SECRET
from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
FILES = {"manifest.json": b'{"files": []}', "bundle.zip": b"PK\x05\x06" + b"\x00" * 18}


async def new_job(client: httpx.AsyncClient, keys: Keys) -> uuid.UUID:
    response = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    return uuid.UUID(response.json()["id"])


async def test_result_is_409_naming_state_and_delivery_until_published(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    queued = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
    assert queued.status_code == 409
    assert queued.headers["content-type"] == "application/problem+json"
    assert queued.json()["type"].endswith("result-not-ready")
    assert (queued.json()["state"], queued.json()["delivery"]) == ("queued", "none")

    attempt = await driver.claim(job_id)
    driver.store.write_staged(job_id, "bundle.zip", b"zip")
    async with driver.engine.begin() as conn:
        from atlas_jobs._app.lifecycle import DeliveryState
        from tests.api.support import WORKER

        await driver.t.stage_output(
            conn, job_id, attempt, DeliveryState.STAGED_PRIVATE, actor=WORKER
        )
    staged = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
    assert staged.status_code == 409
    assert (staged.json()["state"], staged.json()["delivery"]) == ("running", "staged_private")


async def test_available_result_lists_files_with_signed_urls_that_download(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert status["delivery"]["state"] == "available"
    assert (status["delivery"]["files"], status["delivery"]["destination"]) == (len(FILES), None)
    assert status["links"]["result"] == f"/v1/jobs/{job_id}/result"

    response = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
    assert response.status_code == 200
    result = response.json()
    assert result["job_id"] == str(job_id)
    assert result["delivery"]["state"] == "available"
    by_name = {f["name"]: f for f in result["files"]}
    assert set(by_name) == set(FILES)
    for name, data in FILES.items():
        entry = by_name[name]
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        download = await client.get(entry["url"])  # no API key: the URL is the credential
        assert download.status_code == 200, download.text
        assert download.content == data


async def test_download_rejects_tampered_foreign_and_expired_tokens(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    result = (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).json()
    url = result["files"][0]["url"]
    token = url.rsplit("/", 1)[1]

    tampered = await client.get(f"/v1/downloads/{token[:-2]}xx")
    assert tampered.status_code == 403
    assert tampered.json()["type"].endswith("bad-download-signature")

    key_id = DownloadSigner(SIGNING_SECRET, ttl_seconds=60).verify(token).key_id
    other_secret = DownloadSigner("another-secret", ttl_seconds=60).sign(
        DownloadGrant(job_id, "alice", "bundle.zip", key_id)
    )
    assert (await client.get(f"/v1/downloads/{other_secret}")).status_code == 403

    # Bound to the owner: a token naming another owner does not reach alice's files.
    signer = DownloadSigner(SIGNING_SECRET, ttl_seconds=60)
    wrong_owner = signer.sign(DownloadGrant(job_id, "bob", "bundle.zip", key_id))
    assert (await client.get(f"/v1/downloads/{wrong_owner}")).status_code == 410
    unlisted = signer.sign(DownloadGrant(job_id, "alice", "secret.txt", key_id))
    assert (await client.get(f"/v1/downloads/{unlisted}")).status_code == 410

    two_hours_ago = time.time() - 7200
    with pytest.MonkeyPatch.context() as patch:  # a token signed two hours ago
        patch.setattr("itsdangerous.timed.time.time", lambda: two_hours_ago)
        old = signer.sign(DownloadGrant(job_id, "alice", "bundle.zip", key_id))
    expired = await client.get(f"/v1/downloads/{old}")
    assert expired.status_code == 403
    assert "expired" in expired.json()["detail"]


async def test_expired_result_is_410_and_state_stays_succeeded(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    await driver.succeed(job_id, "alice", FILES)
    url = (await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).json()["files"][0]["url"]
    await driver.expire(job_id, "alice")

    result = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
    assert result.status_code == 410
    assert result.json()["type"].endswith("result-expired")
    status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert status["state"] == "succeeded"
    assert status["delivery"]["state"] == "expired"
    assert status["links"]["result"] is None
    download = await client.get(url)
    assert download.status_code == 410
    assert download.json()["type"].endswith("download-gone")


async def test_failed_job_with_private_outputs_is_blocked_and_never_downloadable(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    from atlas_jobs._app.lifecycle import DeliveryState
    from atlas_jobs._app.transitions import error_doc
    from tests.api.support import WORKER

    job_id = await new_job(client, keys)
    attempt = await driver.claim(job_id)
    driver.store.write_staged(job_id, "cover-title.txt", b"tile")
    async with driver.engine.begin() as conn:
        await driver.t.stage_output(
            conn, job_id, attempt, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
        )
        await driver.t.fail(
            conn, job_id, attempt, error=error_doc("x", "y", retryable=False), actor=WORKER
        )
    response = await client.get(f"/v1/jobs/{job_id}/result", headers=keys.a)
    assert response.status_code == 409
    assert (response.json()["state"], response.json()["delivery"]) == ("failed", "blocked")
    forged = DownloadSigner(SIGNING_SECRET, ttl_seconds=60).sign(
        DownloadGrant(job_id, "alice", "cover-title.txt", uuid.uuid4())
    )
    assert (await client.get(f"/v1/downloads/{forged}")).status_code == 410
