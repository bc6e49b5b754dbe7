"""docs/protocol.md §3 over real HTTP: ``atlas-jobs api`` in a subprocess, an httpx client.

Also the 50-parallel Idempotency-Key race and the log canary (no secret from a payload,
no API key and no signed URL in any log line of the server)."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
PROBLEM = "application/problem+json"


async def test_every_row_of_the_protocol_table_over_http(
    live_api: LiveApi, keys: Keys, driver: Driver
) -> None:
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        # POST /jobs: 202 + Location + Retry-After + status body; 401, 400, 413, 415, 422.
        created = await http.post("/v1/jobs", json=BUNDLE, headers=keys.a)
        assert created.status_code == 202
        location = created.headers["location"]
        assert int(created.headers["retry-after"]) >= 1
        assert created.json()["state"] == "queued"
        job_id = uuid.UUID(created.json()["id"])
        assert (await http.post("/v1/jobs", json=BUNDLE)).status_code == 401
        bad = await http.post(
            "/v1/jobs", content=b"{", headers={**keys.a, "content-type": "application/json"}
        )
        assert (bad.status_code, bad.headers["content-type"]) == (400, PROBLEM)
        huge = await http.post(
            "/v1/jobs", json={"kind": "atlas.bundle", "input": {"x": "y" * 70000}}, headers=keys.a
        )
        assert huge.status_code == 413
        form = await http.post(
            "/v1/jobs", content=b"a=b", headers={**keys.a, "content-type": "text/plain"}
        )
        assert form.status_code == 415
        unknown = await http.post("/v1/jobs", json={"kind": "x", "input": {}}, headers=keys.a)
        assert unknown.status_code == 422

        # GET /jobs/{id}: 200 + ETag + Retry-After; 304; 404 unknown or not yours.
        read = await http.get(location, headers=keys.a)
        assert read.status_code == 200
        assert "retry-after" in read.headers
        not_modified = await http.get(
            location, headers={**keys.a, "If-None-Match": read.headers["etag"]}
        )
        assert not_modified.status_code == 304
        assert (await http.get(location, headers=keys.b)).status_code == 404
        assert (await http.get(f"/v1/jobs/{uuid.uuid4()}", headers=keys.a)).status_code == 404

        # GET /jobs/{id}/result: 409 while not available.
        early = await http.get(f"{location}/result", headers=keys.a)
        assert (early.status_code, early.json()["delivery"]) == (409, "none")

        # Publish through the real transitions, then: result 200, download 200.
        await driver.succeed(job_id, "alice", {"bundle.zip": b"PK-bytes"})
        result = await http.get(f"{location}/result", headers=keys.a)
        assert result.status_code == 200
        url = result.json()["files"][0]["url"]
        assert url.startswith(live_api.url)
        download = await http.get(url)
        assert (download.status_code, download.content) == (200, b"PK-bytes")
        assert (await http.get(url[:-3] + "abc")).status_code == 403

        # POST cancel: 409 with the winner once terminal; GET history; GET list.
        late = await http.post(f"{location}/cancel", headers=keys.a)
        assert (late.status_code, late.json()["state"]) == (409, "succeeded")
        history = await http.get(f"{location}/history", headers=keys.a)
        assert [i["to"] for i in history.json()["items"]] == [
            "queued",
            "running",
            "succeeded",
            "succeeded",
        ]
        listing = await http.get("/v1/jobs", params={"state": "succeeded"}, headers=keys.a)
        assert [j["id"] for j in listing.json()["items"]] == [str(job_id)]

        # Expired result: 410 on the reference and on the old URL; state unchanged.
        await driver.expire(job_id, "alice")
        assert (await http.get(f"{location}/result", headers=keys.a)).status_code == 410
        assert (await http.get(url)).status_code == 410
        assert (await http.get(location, headers=keys.a)).json()["state"] == "succeeded"

        # Cancel of a queued job: 202 canceled. Role routes: 403 for clients.
        other = (await http.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"]
        canceled = await http.post(f"/v1/jobs/{other}/cancel", headers=keys.a)
        assert (canceled.status_code, canceled.json()["state"]) == (202, "canceled")
        assert (await http.get("/v1/queue", headers=keys.a)).status_code == 403
        assert (await http.get("/v1/queue", headers=keys.op)).status_code == 200
        replay = await http.post(f"/v1/jobs/{other}/replay", headers=keys.op)
        assert replay.status_code == 202

        # Root endpoints.
        assert (await http.get("/livez")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        assert "atlas_http_requests_total" in (await http.get("/metrics")).text


async def test_idempotency_three_outcomes_and_50_parallel_posts_make_one_job(
    live_api: LiveApi, keys: Keys, driver: Driver
) -> None:
    headers = {**keys.a, "Idempotency-Key": "order-7"}
    limits = httpx.Limits(max_connections=60)
    async with httpx.AsyncClient(base_url=live_api.url, timeout=60, limits=limits) as http:
        answers = await asyncio.gather(
            *(http.post("/v1/jobs", json=BUNDLE, headers=headers) for _ in range(50))
        )
        codes = sorted(a.status_code for a in answers)
        assert set(codes) <= {202, 409}, codes
        accepted = [a for a in answers if a.status_code == 202]
        assert {a.json()["id"] for a in accepted} == {accepted[0].json()["id"]}
        originals = [a for a in accepted if a.headers.get("idempotency-replayed") != "true"]
        assert len(originals) == 1
        for conflict in (a for a in answers if a.status_code == 409):
            assert conflict.json()["type"].endswith("idempotency-key-in-flight")
            assert int(conflict.headers["retry-after"]) >= 1
        job_id = accepted[0].json()["id"]

        # After the race: same key + same body -> the same job, replayed (even if the
        # body leaves the defaulted field out); same key + another body -> 422.
        without_default = {
            "kind": "atlas.bundle",
            "input": {"preset": "coast", "pages": ["cover", "summary"]},
        }
        replay = await http.post("/v1/jobs", json=without_default, headers=headers)
        assert replay.status_code == 202
        assert replay.json()["id"] == job_id
        assert replay.headers["idempotency-replayed"] == "true"
        assert replay.headers["location"] == f"/v1/jobs/{job_id}"
        other_body = {"kind": "atlas.bundle", "input": {**BUNDLE_INPUT, "preset": "reef"}}
        reused = await http.post("/v1/jobs", json=other_body, headers=headers)
        assert reused.status_code == 422
        assert reused.json()["type"].endswith("idempotency-key-reused")

        listing = await http.get("/v1/jobs", headers=keys.a)
        assert [j["id"] for j in listing.json()["items"]] == [job_id]


async def test_log_canary_no_payload_secret_key_or_signed_url_in_logs(
    live_api: LiveApi, keys: Keys, driver: Driver
) -> None:
    secret = f"canary-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        noop = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.noop", "input": {"tag": secret}},
            headers={**keys.a, "Idempotency-Key": "canary"},
        )
        assert noop.status_code == 202
        rejected = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.bundle", "input": {"preset": secret, "pages": [secret]}},
            headers=keys.a,
        )
        assert rejected.status_code == 422
        assert secret not in rejected.text  # validation errors do not echo input values
        job = await http.post("/v1/jobs", json=BUNDLE, headers=keys.a)
        job_id = uuid.UUID(job.json()["id"])
        await driver.succeed(job_id, "alice", {"bundle.zip": secret.encode()})
        url = (await http.get(f"/v1/jobs/{job_id}/result", headers=keys.a)).json()["files"][0][
            "url"
        ]
        assert (await http.get(url)).content == secret.encode()
        token = url.rsplit("/", 1)[1]
        assert (await http.get(url[:-4] + "AAAA")).status_code == 403
        await http.get("/v1/jobs", headers={"Authorization": f"Bearer {keys.alice}x"})
    logs = live_api.logs()
    lines = [line for line in logs.splitlines() if line.strip()]
    requests = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(r.get("route") == "/v1/downloads/{token}" for r in requests)
    assert any(r.get("job_id") == str(job_id) and r.get("owner") == "alice" for r in requests)
    for needle in (secret, keys.alice, keys.alice[:20], token, token[:24]):
        assert needle not in logs


async def test_log_canary_holds_through_a_500_and_unstorable_text(
    live_api: LiveApi, keys: Keys, engine: AsyncEngine
) -> None:
    """A reliability finding: the logs of a database error carry neither the job input nor
    the Idempotency-Key -- not as SQL parameters, not in the error's own text (here the
    database quotes both), not in a second traceback from the server."""
    secret = f"canary-{uuid.uuid4().hex}"
    idempotency_key = f"key-{uuid.uuid4().hex}"
    async with engine.begin() as conn:
        await conn.execute(
            text(
                """
                CREATE FUNCTION refuse_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION 'refused input %', NEW.input::text
                        USING DETAIL = coalesce(NEW.idempotency_key, '-');
                END $$
                """
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_jobs BEFORE INSERT ON jobs"
                " FOR EACH ROW EXECUTE FUNCTION refuse_jobs()"
            )
        )
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        nul = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.noop", "input": {"tag": secret + "\u0000"}},
            headers={**keys.a, "Idempotency-Key": idempotency_key},
        )
        assert nul.status_code == 422
        refused = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.noop", "input": {"tag": secret}},
            headers={**keys.a, "Idempotency-Key": idempotency_key},
        )
        assert refused.status_code == 500
        assert refused.headers["content-type"] == PROBLEM
        assert secret not in refused.text
        assert idempotency_key not in refused.text
    logs = live_api.logs()
    events = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    errors = [e for e in events if e.get("event") == "unhandled_error"]
    assert len(errors) == 1, logs
    assert errors[0]["sqlstate"] == "P0001"
    assert errors[0]["request_id"]
    assert "Traceback" not in logs
    for needle in (secret, idempotency_key):
        assert needle not in logs
