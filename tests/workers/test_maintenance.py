"""The reaper, the sweeper and the batched heartbeat, one ``run_once`` at a time, with
the test clock moved instead of waiting."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import attempts, job_history
from atlas_jobs._app.lifecycle import DeliveryState, JobState, Reason
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, Applied, Rejected, RejectReason, Transitions
from atlas_jobs._workers.reaper import Reaper
from atlas_jobs._workers.sweeper import Sweeper
from tests.factory import JobFactory
from tests.workers.dbwait import history

WORKER = Actor("worker", "w-test")


async def _attempt_outcome(engine: AsyncEngine, attempt_id: uuid.UUID | None) -> str:
    async with engine.connect() as conn:
        return str(
            (
                await conn.execute(select(attempts.c.outcome).where(attempts.c.id == attempt_id))
            ).scalar_one()
        )


async def test_reaper_requeues_an_expired_lease_and_leaves_live_ones(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    expired = await jobs.make(JobState.RUNNING)
    clock.advance(31)  # past the 30 s lease of the factory's claim
    live = await jobs.make(JobState.RUNNING)

    assert await Reaper(engine, transitions).run_once() == 1

    row = await jobs.row(expired.id)
    assert (row.state, row.reason) == ("queued", "retry")
    assert row.last_error["code"] == "lease_expired"
    assert await _attempt_outcome(engine, expired.attempt_id) == "lost"
    assert (await jobs.row(live.id)).state == "running"
    events = await history(engine, expired.id)
    assert (events[-1].transition, events[-1].actor) == ("rescue", "system:reaper")


async def test_reaper_gives_up_when_the_attempt_budget_is_spent(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    job = await jobs.make(JobState.RUNNING, max_attempts=1)
    clock.advance(31)

    assert await Reaper(engine, transitions).run_once() == 1

    row = await jobs.row(job.id)
    assert (row.state, row.reason) == ("unresolved", "lease_lost")


async def test_reaper_finishes_an_abandoned_cancel_request_as_canceled(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    job = await jobs.make(JobState.CANCEL_REQUESTED)
    clock.advance(31)

    assert await Reaper(engine, transitions).run_once() == 1
    assert (await jobs.row(job.id)).state == "canceled"


async def test_reaper_works_through_more_than_one_batch(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    made = [await jobs.make(JobState.RUNNING) for _ in range(5)]
    clock.advance(31)

    assert await Reaper(engine, transitions, batch_size=2).run_once() == 5
    assert {(await jobs.row(j.id)).state for j in made} == {"queued"}


async def test_sweeper_expires_results_past_retention_and_removes_their_files(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory, data_dir: Path
) -> None:
    store = FilesystemStore(data_dir / "results")
    job = await jobs.make(JobState.SUCCEEDED)  # published with a 60 s retention
    store.write_staged(job.id, "bundle.zip", b"zip")
    store.publish("alice", job.id)
    sweeper = Sweeper(engine, transitions, store)

    assert (await sweeper.run_once()).expired == 0  # retention not passed yet
    clock.advance(61)
    assert (await sweeper.run_once()).expired == 1

    row = await jobs.row(job.id)
    assert (row.state, row.delivery_state) == ("succeeded", "expired")
    assert store.published_path("alice", job.id, "bundle.zip") is None
    assert (await sweeper.run_once()).expired == 0  # idempotent


async def test_sweeper_removes_private_outputs_of_finished_jobs_only(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, data_dir: Path
) -> None:
    store = FilesystemStore(data_dir / "results")
    running = await jobs.make(JobState.RUNNING)
    failed = await jobs.make(JobState.RUNNING)
    for made in (running, failed):
        store.write_staged(made.id, "tile.txt", b"tile")
        assert made.attempt_id is not None
        async with engine.begin() as conn:
            await transitions.stage_output(
                conn, made.id, made.attempt_id, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
            )
    async with engine.begin() as conn:
        assert failed.attempt_id is not None
        await transitions.fail(
            conn,
            failed.id,
            failed.attempt_id,
            error={"code": "x", "message": "y", "retryable": False},
            actor=WORKER,
        )
    assert (await jobs.row(failed.id)).delivery_state == "blocked"

    report = await Sweeper(engine, transitions, store).run_once()

    assert report.cleaned == 1
    assert store.staged_files(failed.id) == []
    assert [f.name for f in store.staged_files(running.id)] == ["tile.txt"]


async def test_heartbeat_many_extends_live_leases_and_reports_lost_ones(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    running = await jobs.make(JobState.RUNNING)
    canceling = await jobs.make(JobState.CANCEL_REQUESTED)
    stale = await jobs.make(JobState.RUNNING)
    assert running.attempt_id
    assert canceling.attempt_id
    assert stale.attempt_id
    before = (await jobs.row(running.id)).lease_expires_at
    clock.advance(5)

    async with engine.begin() as conn:
        states = await transitions.heartbeat_many(
            conn,
            [
                (running.id, running.attempt_id),
                (canceling.id, canceling.attempt_id),
                (stale.id, uuid.uuid4()),  # not the current attempt
            ],
        )

    assert states == {
        running.id: JobState.RUNNING,
        canceling.id: JobState.CANCEL_REQUESTED,
        stale.id: None,
    }
    assert (await jobs.row(running.id)).lease_expires_at > before


async def test_heartbeat_many_skips_a_row_locked_by_a_publication(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    job = await jobs.make(JobState.RUNNING)
    assert job.attempt_id is not None
    async with engine.begin() as publishing:
        assert await transitions.lock_for_publication(publishing, job.id, job.attempt_id)
        async with engine.begin() as conn:
            states = await transitions.heartbeat_many(conn, [(job.id, job.attempt_id)])
    assert states == {}  # still held; extended on the next beat, never waited for


async def test_publish_many_is_fenced_and_writes_history_and_attempts(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    held = await jobs.make(JobState.RUNNING)
    canceling = await jobs.make(JobState.CANCEL_REQUESTED)
    stale = await jobs.make(JobState.RUNNING)
    assert held.attempt_id is not None
    assert canceling.attempt_id is not None

    async with engine.begin() as conn:
        published = await transitions.publish_many(
            conn,
            [
                (held.id, held.attempt_id),
                (canceling.id, canceling.attempt_id),
                (stale.id, uuid.uuid4()),
            ],
            result_ref={"files": []},
            ttl_seconds=60,
            actor=WORKER,
        )

    assert [type(r).__name__ for r in published] == ["Applied", "Applied", "Rejected"]
    assert {r.job.id for r in published if isinstance(r, Applied)} == {held.id, canceling.id}
    assert published[2] == Rejected("publish", RejectReason.STALE_ATTEMPT, JobState.RUNNING)
    for made, source in ((held, "running"), (canceling, "cancel_requested")):
        row = await jobs.row(made.id)
        assert (row.state, row.delivery_state, row.result_ref) == (
            "succeeded",
            "available",
            {"files": []},
        )
        assert row.current_attempt_id is None
        assert row.finished_at is not None
        assert await _attempt_outcome(engine, made.attempt_id) == "succeeded"
        last = (await history(engine, made.id))[-1]
        assert (last.transition, last.from_state, last.to_state, last.actor) == (
            "publish",
            source,
            "succeeded",
            "worker:w-test",
        )
        assert last.attempt_id == made.attempt_id
    assert (await jobs.row(stale.id)).state == "running"


async def test_sweeper_applies_each_waiting_jobs_deadline_rule(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory, data_dir: Path
) -> None:
    """docs/protocol.md §2.1: a waiting job always has a deadline and what happens when it
    passes."""
    fails = await jobs.make(JobState.RUNNING)
    escalates = await jobs.make(JobState.RUNNING)
    for made, rule in ((fails, "fail"), (escalates, "escalate")):
        assert made.attempt_id is not None
        async with engine.begin() as conn:
            waited = await transitions.wait(
                conn,
                made.id,
                made.attempt_id,
                reason=Reason.EXTERNAL,
                deadline_seconds=30,
                on_deadline=rule,
                actor=WORKER,
            )
        assert waited.ok
    sweeper = Sweeper(engine, transitions, FilesystemStore(data_dir / "results"))

    assert (await sweeper.run_once()).deadlines == 0  # not yet
    clock.advance(31)
    assert (await sweeper.run_once()).deadlines == 2
    assert (await sweeper.run_once()).deadlines == 0  # each rule applies once

    failed, unresolved = await jobs.row(fails.id), await jobs.row(escalates.id)
    assert (failed.state, failed.reason) == ("failed", "deadline_passed")
    assert failed.error["code"] == "deadline_passed"
    assert (unresolved.state, unresolved.reason) == ("unresolved", "deadline_escalated")
    assert unresolved.wait_deadline_at is None
    async with engine.connect() as conn:
        moves = {
            (r.transition, r.from_state, r.to_state, r.actor)
            for r in await conn.execute(
                select(job_history).where(job_history.c.job_id.in_([fails.id, escalates.id]))
            )
        }
    assert ("deadline_fail", "waiting", "failed", "system:sweeper") in moves
    assert ("deadline_escalate", "waiting", "unresolved", "system:sweeper") in moves
