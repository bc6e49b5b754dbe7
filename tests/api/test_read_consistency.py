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

from atlas_jobs._app.db import reads
from atlas_jobs._app.services.feeds import FeedHub
from tests.api.support import BUNDLE_INPUT, WORKER, Driver, Keys, commit_before

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

    published = commit_before(  # after the job's statement, before the stages'
        monkeypatch,
        reads,
        "plan_stages",
        lambda: driver.publish(job_id, attempt, "alice", {"bundle.zip": b"zip"}),
    )
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

    async def one_more_unit() -> None:
        async with driver.engine.begin() as conn:
            outcome = await driver.t.record_progress(
                conn, job_id, attempt, "validate", "refs", actor=WORKER
            )
        assert outcome.ok

    changed = commit_before(monkeypatch, reads, "plan_stages_of_version", one_more_unit)
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
