"""A read that takes several statements answers one version of the job.

CI once saw an event stream send ``transition succeeded`` and then a ``progress`` event:
under read committed the feed read the job (still running), a publication committed, and
the history read that followed saw the ``succeeded`` row. A plain status read of a
planned job has the same two statements (the job, then its stages). Here a change
commits exactly there, between the job's statement and the next.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.feeds import FeedHub
from app.db import reads
from tests.api.support import BUNDLE_INPUT, WORKER, Driver, Keys

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def test_a_transition_committed_during_a_feed_read_waits_for_the_next_read(
    app: FastAPI,
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    job_id = uuid.UUID(created.json()["id"])
    attempt = await driver.claim(job_id)
    feeds: FeedHub = app.state.atlas.feeds
    before = await feeds.read(job_id, None)
    assert before.job is not None
    assert before.job.state == "running"

    plan_stages = reads.plan_stages
    published: list[bool] = []

    async def publish_then_read(conn: Any, job: Any) -> Any:
        if not published:  # once: after the job read, before the stages and history
            await driver.publish(job_id, attempt, "alice", {"bundle.zip": b"zip"})
            published.append(True)
        return await plan_stages(conn, job)

    monkeypatch.setattr(reads, "plan_stages", publish_then_read)
    during = await feeds.read(job_id, before)
    assert published
    assert during.job is not None
    assert during.job.state == "running"
    assert [row.to_state for row in during.history] == ["queued", "running"]

    after = await feeds.read(job_id, during)
    assert after.job is not None
    assert after.job.state == "succeeded"
    assert [row.to_state for row in after.history] == ["queued", "running", "succeeded"]


async def test_a_change_committed_during_a_status_read_is_answered_whole(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    job_id = uuid.UUID(created.json()["id"])
    attempt = await driver.claim(job_id)
    await driver.progress(job_id, attempt)  # a plan, and one unit of "validate" done
    before = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    assert _validate_done(before.json()) == 1

    stages_of_version = reads.plan_stages_of_version
    changed: list[bool] = []

    async def progress_then_read(conn: Any, job: Any) -> Any:
        if not changed:  # once: after the job's statement, before the stages'
            async with driver.engine.begin() as other:
                outcome = await driver.t.record_progress(
                    other, job_id, attempt, "validate", "refs", actor=WORKER
                )
                assert outcome.ok
            changed.append(True)
        return await stages_of_version(conn, job)

    monkeypatch.setattr(reads, "plan_stages_of_version", progress_then_read)
    during = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
    assert changed
    assert during.status_code == 200
    # The job was read again: the ETag is the version whose stages the body shows.
    assert during.headers["ETag"] != before.headers["ETag"]
    assert _validate_done(during.json()) == 2
    monkeypatch.undo()
    assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).headers["ETag"] == (
        during.headers["ETag"]
    )


def _validate_done(body: dict[str, Any]) -> int:
    stages = {stage["name"]: stage for stage in body["progress"]["stages"]}
    done: int = stages["validate"]["done"]
    return done
