"""Operator (resume/fail/replay/cancel, queue) and reviewer routes."""

from __future__ import annotations

import uuid

import httpx

from tests.api.support import BUNDLE_INPUT, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def new_job(client: httpx.AsyncClient, keys: Keys) -> uuid.UUID:
    return uuid.UUID((await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)).json()["id"])


async def test_unresolved_job_shows_why_and_operator_resumes_it(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    await driver.unresolve(job_id)
    status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert (status["state"], status["reason"]) == ("unresolved", "retries_exhausted")
    assert status["last_error"]["message"] == "the tile service kept timing out"

    client_try = await client.post(f"/v1/jobs/{job_id}/resume", headers=keys.a)
    assert client_try.status_code == 403
    resumed = await client.post(
        f"/v1/jobs/{job_id}/resume", json={"note": "tile service fixed"}, headers=keys.op
    )
    assert resumed.status_code == 202, resumed.text
    assert (resumed.json()["state"], resumed.json()["reason"]) == ("queued", "resumed")
    again = await client.post(f"/v1/jobs/{job_id}/resume", headers=keys.op)
    assert again.status_code == 409
    assert again.json()["state"] == "queued"
    history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()["items"]
    assert history[-1]["actor"] == "operator:ops"
    assert history[-1]["note"] == "tile service fixed"


async def test_operator_fails_or_cancels_unresolved_and_client_cannot(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    to_fail, to_cancel = await new_job(client, keys), await new_job(client, keys)
    await driver.unresolve(to_fail)
    await driver.unresolve(to_cancel)
    failed = await client.post(
        f"/v1/jobs/{to_fail}/fail", json={"note": "input is bad"}, headers=keys.op
    )
    assert failed.status_code == 202
    assert failed.json()["state"] == "failed"
    assert failed.json()["error"]["message"] == "input is bad"

    by_client = await client.post(f"/v1/jobs/{to_cancel}/cancel", headers=keys.a)
    assert by_client.status_code == 409
    assert by_client.json()["state"] == "unresolved"
    by_operator = await client.post(f"/v1/jobs/{to_cancel}/cancel", headers=keys.op)
    assert by_operator.status_code == 202
    assert by_operator.json()["state"] == "canceled"


async def test_replay_creates_a_new_job_and_keeps_the_old_one(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await new_job(client, keys)
    running = await client.post(f"/v1/jobs/{job_id}/replay", headers=keys.op)
    assert running.status_code == 409  # not terminal yet
    await driver.fail(job_id)
    replayed = await client.post(f"/v1/jobs/{job_id}/replay", headers=keys.op)
    assert replayed.status_code == 202
    new = replayed.json()
    assert new["id"] != str(job_id)
    assert new["replay_of"] == str(job_id)
    assert new["state"] == "queued"
    assert replayed.headers["location"] == f"/v1/jobs/{new['id']}"
    # The replay belongs to the original owner, who sees both.
    assert (await client.get(f"/v1/jobs/{new['id']}", headers=keys.a)).status_code == 200
    old = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    assert old["state"] == "failed"
    missing = await client.post(f"/v1/jobs/{uuid.uuid4()}/replay", headers=keys.op)
    assert missing.status_code == 404


async def test_review_approve_reject_and_409_when_not_waiting(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    approve_me, reject_me = await new_job(client, keys), await new_job(client, keys)
    not_waiting = await client.post(
        f"/v1/jobs/{approve_me}/review", json={"decision": "approve"}, headers=keys.rev
    )
    assert not_waiting.status_code == 409
    assert not_waiting.json()["type"].endswith("not-awaiting-review")
    assert not_waiting.json()["state"] == "queued"

    await driver.await_review(approve_me)
    await driver.await_review(reject_me)
    waiting = (await client.get(f"/v1/jobs/{approve_me}", headers=keys.a)).json()
    assert (waiting["state"], waiting["reason"]) == ("waiting", "review")
    assert waiting["wait"]["on_deadline"] == "fail"

    by_client = await client.post(
        f"/v1/jobs/{approve_me}/review", json={"decision": "approve"}, headers=keys.a
    )
    assert by_client.status_code == 403
    approved = await client.post(
        f"/v1/jobs/{approve_me}/review",
        json={"decision": "approve", "note": "ok"},
        headers=keys.rev,
    )
    assert approved.status_code == 202
    assert (approved.json()["state"], approved.json()["reason"]) == ("queued", "review_approved")
    rejected = await client.post(
        f"/v1/jobs/{reject_me}/review",
        json={"decision": "reject", "note": "wrong preset"},
        headers=keys.rev,
    )
    assert rejected.status_code == 202
    assert rejected.json()["state"] == "failed"
    assert rejected.json()["error"]["message"] == "wrong preset"
    bad = await client.post(
        f"/v1/jobs/{reject_me}/review", json={"decision": "maybe"}, headers=keys.rev
    )
    assert bad.status_code == 422


async def test_a_repeated_review_decision_is_a_replay_and_the_other_one_conflicts(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    """Like a repeated cancel: the same decision after it took effect answers the status
    (200, Idempotency-Replayed), records nothing; the other decision is 409 naming the
    one that took effect (before: both were 409 not-awaiting-review)."""
    approve_me, reject_me = await new_job(client, keys), await new_job(client, keys)
    for job_id in (approve_me, reject_me):
        await driver.await_review(job_id)

    async def review(job_id: str, decision: str) -> httpx.Response:
        return await client.post(
            f"/v1/jobs/{job_id}/review", json={"decision": decision}, headers=keys.rev
        )

    for job_id, decision, other in (
        (approve_me, "approve", "reject"),
        (reject_me, "reject", "approve"),
    ):
        first = await review(job_id, decision)
        assert first.status_code == 202, first.text
        assert "idempotency-replayed" not in first.headers
        history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()
        again = await review(job_id, decision)
        assert again.status_code == 200, again.text
        assert again.headers["idempotency-replayed"] == "true"
        assert again.json()["state"] == first.json()["state"]
        assert again.json()["reason"] == first.json()["reason"]
        conflict = await review(job_id, other)
        assert conflict.status_code == 409, conflict.text
        problem = conflict.json()
        assert problem["type"].endswith("conflicting-decision")
        assert (problem["decision"], problem["state"]) == (decision, first.json()["state"])
        after = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)).json()
        assert after == history, "neither the replay nor the conflict is recorded"


async def test_queue_view_counts_per_kind_and_state_for_operators_only(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    first, second, _third = [await new_job(client, keys) for _ in range(3)]
    await driver.claim(first)
    await driver.fail(second)
    assert (await client.get("/v1/queue", headers=keys.a)).status_code == 403
    response = await client.get("/v1/queue", headers=keys.op)
    assert response.status_code == 200
    lines = {(line["kind"], line["state"]): line for line in response.json()["lines"]}
    assert set(lines) == {("atlas.bundle", "queued"), ("atlas.bundle", "running")}
    assert lines[("atlas.bundle", "queued")]["count"] == 1
    running = lines[("atlas.bundle", "running")]
    assert (running["count"], running["live_leases"], running["expired_leases"]) == (1, 1, 0)
    assert running["oldest_age_seconds"] >= 0
