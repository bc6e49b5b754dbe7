"""A feed read is one snapshot: the job row and the history it shows agree.

CI once saw an event stream send ``transition succeeded`` and then a ``progress`` event:
under read committed the feed read the job (still running), a publication committed, and
the history read that followed saw the ``succeeded`` row. The publication here commits
exactly there, between the job read and the reads after it.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.feeds import FeedHub
from app.db import reads
from tests.api.support import BUNDLE_INPUT, Driver, Keys

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
