"""The seed histories of docs/protocol.md §8 against a real worker process (no HTTP).

j-41 coast succeeds with plan expansion and later expires; j-42 reef fails with blocked
outputs; j-43 cancel during build; j-44 cancel during publication loses; squall retries
twice and then succeeds.
"""

from __future__ import annotations

import io
import json
import zipfile

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import DeliveryState, JobState
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, Applied, Rejected, Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import (
    attempt_rows,
    create_bundle,
    eventually,
    history,
    stage_rows,
    wait_for,
    wait_for_state,
)

OWNER = Actor("client", "alice")
SIX_TILES = [
    "cover-title.txt",
    "cover-key.txt",
    "summary-counts.txt",
    "summary-notes.txt",
    "cover-legend.txt",
    "summary-source.txt",
]


async def test_coast_succeeds_with_plan_expansion_and_a_published_bundle(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(bundle_time_scale=0.05)
    job_id = await create_bundle(engine, transitions, "coast")
    fleet.start("w1", concurrency=2)

    row = await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)

    assert row.delivery_state == DeliveryState.AVAILABLE.value
    assert row.plan_revision == 2
    assert row.attempt == 1
    stages = await stage_rows(engine, job_id)
    assert (stages["build"].done, stages["build"].total, stages["build"].plan_revision) == (6, 6, 2)
    assert (stages["validate"].done, stages["validate"].total) == (4, 4)
    assert (stages["package"].done, stages["package"].total) == (2, 2)

    events = await history(engine, job_id)
    assert [e.transition for e in events] == ["create", "claim", "expand_plan", "publish"]
    expansion = events[2]
    assert expansion.data == {"stage": "build", "total": 6}
    # "2 of 6 tiles; plan expanded": exactly two tiles were done when the plan grew.
    async with engine.connect() as conn:
        from sqlalchemy import select

        from atlas_jobs._app.db.schema import job_checkpoints

        built_before = (
            await conn.execute(
                select(job_checkpoints.c.unit_name).where(
                    job_checkpoints.c.job_id == job_id,
                    job_checkpoints.c.stage == "build",
                    job_checkpoints.c.at < expansion.at,
                )
            )
        ).all()
    assert sorted(r.unit_name for r in built_before) == ["cover-key", "cover-title"]

    names = sorted(f["name"] for f in row.result_ref["files"])
    assert names == sorted([*SIX_TILES, "bundle.zip", "manifest.json"])
    manifest_path = store.published_path("alice", job_id, "manifest.json")
    assert manifest_path is not None
    manifest = json.loads(manifest_path.read_text())
    assert manifest == {"job_id": str(job_id), "format": "text-bundle-v1", "files": SIX_TILES}
    zip_path = store.published_path("alice", job_id, "bundle.zip")
    assert zip_path is not None
    with zipfile.ZipFile(io.BytesIO(zip_path.read_bytes())) as archive:
        assert sorted(archive.namelist()) == sorted([*SIX_TILES, "manifest.json"])
        assert archive.read("cover-legend.txt").startswith(b"Atlas tile cover-legend")
    assert store.staged_files(job_id) == []  # nothing private is left behind


async def test_coast_result_expires_after_its_ttl_and_the_state_stays_succeeded(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(bundle_time_scale=0.01, result_ttl_seconds=1.0)
    job_id = await create_bundle(engine, transitions, "coast")
    fleet.start("w1", concurrency=1)

    await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
    row = await wait_for(
        engine, job_id, lambda r: r.delivery_state == DeliveryState.EXPIRED.value, timeout=30
    )

    assert row.state == JobState.SUCCEEDED.value
    assert row.result_ref is not None  # the reference stays; the files do not

    # The sweeper commits "expired" first and removes the files right after (a reader is
    # never handed a link to removed files), so the removal may trail the state by a moment.
    async def published() -> object:
        return store.published_path("alice", job_id, "bundle.zip")

    await eventually(published, lambda path: path is None, timeout=10, what="files removed")
    events = await history(engine, job_id)
    assert events[-1].transition == "expire_result"
    assert (events[-1].from_state, events[-1].to_state) == ("succeeded", "succeeded")
    assert events[-1].actor == "system:sweeper"


async def test_reef_fails_permanently_and_its_private_outputs_are_blocked_and_removed(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(bundle_time_scale=0.01)
    job_id = await create_bundle(engine, transitions, "reef")
    fleet.start("w1", concurrency=1)

    row = await wait_for_state(engine, job_id, JobState.FAILED, timeout=60)

    assert row.error["code"] == "tile_unbuildable"
    assert row.error["retryable"] is False
    assert row.result_ref is None
    assert row.delivery_state == DeliveryState.BLOCKED.value
    assert row.attempt == 1  # a permanent error is not retried
    stages = await stage_rows(engine, job_id)
    assert stages["build"].done == 5  # tiles existed before the failure
    await wait_for(engine, job_id, lambda _r: store.staged_files(job_id) == [], timeout=10)
    assert store.published_path("alice", job_id, "cover-title.txt") is None


async def test_squall_retries_twice_then_succeeds_with_its_attempts_visible(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet(bundle_time_scale=0.01, poll_interval_seconds=0.2)
    job_id = await create_bundle(engine, transitions, "squall")
    fleet.start("w1", concurrency=1)

    row = await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)

    assert row.attempt == 3
    tries = await attempt_rows(engine, job_id)
    assert [a.outcome for a in tries] == ["retry", "retry", "succeeded"]
    assert all(a.error["code"] == "tile_source_unavailable" for a in tries[:2])
    events = await history(engine, job_id)
    retries = [e for e in events if e.transition == "retry_later"]
    assert len(retries) == 2
    assert all(
        (e.from_state, e.to_state, e.reason) == ("running", "queued", "retry") for e in retries
    )
    # Checkpoints: the third attempt did not rebuild the tiles finished before.
    async with engine.connect() as conn:
        from sqlalchemy import select

        from atlas_jobs._app.db.schema import job_checkpoints

        by_attempt = {
            r.unit_name: r.attempt_id
            for r in await conn.execute(
                select(job_checkpoints).where(job_checkpoints.c.job_id == job_id)
            )
        }
    assert by_attempt["cover-title"] == tries[0].id
    assert by_attempt["summary-notes"] == tries[2].id


async def test_cancel_during_build_stops_at_a_safe_point(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(bundle_time_scale=0.2)
    job_id = await create_bundle(engine, transitions, "coast")
    fleet.start("w1", concurrency=1)
    await wait_for(
        engine,
        job_id,
        lambda r: r.current_stage == "build" and r.delivery_state == "partial_private",
        timeout=60,
    )

    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, job_id, actor=OWNER)
    assert isinstance(outcome, Applied)
    assert outcome.to_state == JobState.CANCEL_REQUESTED

    row = await wait_for_state(engine, job_id, JobState.CANCELED, timeout=30)
    assert row.result_ref is None
    assert row.delivery_state == DeliveryState.BLOCKED.value
    events = await history(engine, job_id)
    moves = [(e.transition, e.from_state, e.to_state) for e in events]
    assert moves[-2:] == [
        ("request_cancel", "running", "cancel_requested"),
        ("stop_canceled", "cancel_requested", "canceled"),
    ]
    assert events[-1].actor == "worker:w1"
    stages = await stage_rows(engine, job_id)
    assert stages["build"].done < 6
    # Private outputs are removed right after the canceled state commits.
    await wait_for(engine, job_id, lambda _r: store.staged_files(job_id) == [], timeout=10)


async def test_cancel_during_publication_loses_and_is_visible_in_history(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(bundle_time_scale=0.25)  # publication holds the row ~0.25 s
    job_id = await create_bundle(engine, transitions, "coast")
    fleet.start("w1", concurrency=1)
    await wait_for(engine, job_id, lambda r: r.current_stage == "publish", timeout=60)

    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, job_id, actor=OWNER)

    row = await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=30)
    assert row.delivery_state == DeliveryState.AVAILABLE.value
    assert store.published_path("alice", job_id, "bundle.zip") is not None
    events = await history(engine, job_id)
    cancels = [e for e in events if e.transition == "request_cancel"]
    assert len(cancels) == 1
    if isinstance(outcome, Rejected):  # the usual case: it waited on the publication lock
        assert outcome.current == JobState.SUCCEEDED
        assert (cancels[0].from_state, cancels[0].to_state) == ("succeeded", "succeeded")
        assert cancels[0].reason == "cancel_too_late"
        assert events[-1].transition == "request_cancel"
    else:  # it slipped in just before the lock: publication had started and still won
        assert (cancels[0].from_state, cancels[0].to_state) == ("running", "cancel_requested")
        assert (events[-1].transition, events[-1].from_state) == ("publish", "cancel_requested")
