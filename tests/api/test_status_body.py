"""The status body, built as ONE validation of plain fields
(``atlas_jobs._app.services.views.job_status``), is byte for byte the body the model-by-model
construction gives (each nested model built and validated on its own, as it was once), for a job
in each state a client can see: queued, running with a plan, queued for a retry, waiting for review,
unresolved, succeeded with its result available and then expired, failed, cancel_requested and
canceled. Each body is read over HTTP and also parses back into the same model."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.lifecycle import ACTIVE_STATES, DeliveryState, JobState, Reason, is_terminal
from atlas_jobs._app.services.schemas import (
    CancelPublic,
    DeliveryPublic,
    ErrorPublic,
    JobLinks,
    JobPublic,
    ProgressPublic,
    StagePublic,
    WaitingForPublic,
    WaitPublic,
)
from atlas_jobs._app.services.views import (
    effective_delivery,
    job_path,
    next_attempt_at,
    waiting_for,
)
from atlas_jobs._app.transitions import Transitions, error_doc
from tests.api.support import BUNDLE_INPUT, WORKER, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


def _error(value: Mapping[str, Any] | None) -> ErrorPublic | None:
    if not value:
        return None
    return ErrorPublic(
        code=str(value.get("code", "error")),
        message=str(value.get("message", "")),
        retryable=bool(value.get("retryable", False)),
        evidence=value.get("evidence") if isinstance(value.get("evidence"), dict) else None,
    )


def model_by_model(job: Any, stages: Sequence[Any]) -> JobPublic:
    """The reference: the status body as it was once built, every nested model
    constructed (and validated) on its own."""
    state = JobState(job.state)
    reason = Reason(job.reason)
    delivery = effective_delivery(job)
    active = state in ACTIVE_STATES
    retrying = state == JobState.QUEUED and reason == Reason.RETRY
    path = job_path(job.id)
    wait = (
        WaitPublic(deadline=job.wait_deadline_at, on_deadline=job.wait_on_deadline)
        if state == JobState.WAITING and job.wait_deadline_at is not None
        else None
    )
    cancel = (
        CancelPublic.model_validate(
            {
                "requested_at": job.cancel["requested_at"],
                "requested_by": job.cancel["requested_by"],
            }
        )
        if job.cancel
        else None
    )
    return JobPublic(
        id=job.id,
        kind=job.kind,
        kind_version=job.kind_version,
        state=state,
        reason=reason,
        created_at=job.created_at,
        updated_at=job.updated_at,
        finished_at=job.finished_at,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        priority=job.priority,
        next_attempt_at=next_attempt_at(job),
        last_error=_error(job.last_error) if retrying or state == JobState.UNRESOLVED else None,
        lease_expires_at=job.lease_expires_at if active else None,
        heartbeat_at=job.heartbeat_at if active else None,
        wait=wait,
        progress=ProgressPublic(
            stage=job.current_stage,
            plan_revision=job.plan_revision,
            stages=[
                StagePublic(name=s.name, unit=s.unit, done=s.done, total=s.total) for s in stages
            ],
        ),
        delivery=DeliveryPublic(
            state=delivery,
            expires_at=job.delivery_expires_at,
            files=job.result_files,
            destination=job.result_destination,
        ),
        error=_error(job.error),
        cancel=cancel,
        replay_of=job.replay_of,
        run_at=job.run_at,
        start_by=job.start_by,
        waiting_for=(
            WaitingForPublic.model_validate(waiting) if (waiting := waiting_for(job)) else None
        ),
        links=JobLinks(
            self=path,
            history=f"{path}/history",
            events=f"{path}/events",
            result=f"{path}/result" if delivery == DeliveryState.AVAILABLE else None,
            cancel=None if is_terminal(state) else f"{path}/cancel",
        ),
    )


async def assert_body_is_the_models(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, job_id: uuid.UUID
) -> dict[str, Any]:
    read = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    assert read.status_code == 200, read.text
    async with engine.connect() as conn:
        row = await reads.get_job_now(conn, job_id, owner=None, clock=Clock())
        assert row is not None
        stages = await reads.plan_stages(conn, row)
    reference = model_by_model(row, stages)
    assert read.content == reference.model_dump_json(by_alias=True).encode()
    assert JobPublic.model_validate_json(read.content) == reference
    body: dict[str, Any] = read.json()
    return body


async def create(client: httpx.AsyncClient, keys: Keys) -> uuid.UUID:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert created.status_code == 202, created.text
    return uuid.UUID(created.json()["id"])


async def test_the_status_body_of_each_state_is_the_model_by_model_body(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    driver: Driver,
    transitions: Transitions,
) -> None:
    seen: dict[tuple[str, str], dict[str, Any]] = {}

    async def check(job_id: uuid.UUID) -> None:
        body = await assert_body_is_the_models(client, keys, engine, job_id)
        seen[(body["state"], body["reason"])] = body

    queued = await create(client, keys)
    await check(queued)
    await client.post(f"/v1/jobs/{queued}/cancel", headers=keys.a)  # canceled at once
    await check(queued)

    running = await create(client, keys)
    attempt = await driver.claim(running)
    await driver.progress(running, attempt)
    await check(running)
    await client.post(f"/v1/jobs/{running}/cancel", headers=keys.a)  # cancel_requested
    await check(running)

    retrying = await create(client, keys)
    attempt = await driver.claim(retrying)
    async with engine.begin() as conn:
        error = error_doc("flaky", "the tile service timed out", retryable=True)
        moved = await transitions.retry_later(
            conn, retrying, attempt, error=error, delay_seconds=600, actor=WORKER
        )
        assert moved.ok
    await check(retrying)

    reviewed = await create(client, keys)
    await driver.await_review(reviewed)
    await check(reviewed)

    unresolved = await create(client, keys)
    await driver.unresolve(unresolved)
    await check(unresolved)

    failed = await create(client, keys)
    await driver.fail(failed)
    await check(failed)

    succeeded = await create(client, keys)
    await driver.succeed(succeeded, "alice", {"bundle.txt": b"tiles"})
    available = await assert_body_is_the_models(client, keys, engine, succeeded)
    await driver.expire(succeeded, "alice")
    await check(succeeded)

    assert available["delivery"]["state"] == "available"
    assert available["links"]["result"] == f"/v1/jobs/{succeeded}/result"
    assert seen[("succeeded", "published")]["delivery"]["state"] == "expired"
    assert set(seen) == {
        ("queued", "new"),
        ("canceled", "canceled"),
        ("running", "claimed"),
        ("cancel_requested", "cancel_requested"),
        ("queued", "retry"),
        ("waiting", "review"),
        ("unresolved", "retries_exhausted"),
        ("failed", "error"),
        ("succeeded", "published"),
    }
    assert seen[("running", "claimed")]["progress"]["stages"][0]["done"] == 1
    assert seen[("queued", "retry")]["last_error"]["code"] == "flaky"
    assert seen[("waiting", "review")]["wait"]["on_deadline"] == "fail"
    assert seen[("cancel_requested", "cancel_requested")]["cancel"]["requested_by"]
