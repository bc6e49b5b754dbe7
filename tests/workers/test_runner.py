""":class:`~atlas_jobs._workers.runner.JobRunner` in process: one claimed attempt run to its end by a
fake handler, and the ending read back from the rows (job, attempt, history, files).

The process tests (``test_crashes``, ``test_shutdown``) keep what only a real process
can show -- kill -9, SIGSTOP, SIGTERM; here every branch of the runner is driven
directly, and time moves with the test clock instead of sleeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from atlas_jobs._app.lifecycle import AttemptOutcome, DeliveryState
from atlas_jobs._app.transitions import Applied, NewJob
from tests.factory import CLIENT
from tests.workers.inprocess import KEY, Harness, bounded, running
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import PermanentError, RecoverableError
from atlas_jobs._workers.handlers import registry
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan
from atlas_jobs._workers.heartbeat import Heartbeat


async def test_success_publishes_the_staged_files_and_ends_the_attempt(harness: Harness) -> None:
    job_id = await harness.create()

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.set_plan([("work", "page", 1)])
        await ctx.write_file("out.txt", b"hello")
        await ctx.checkpoint("work", "p1", delivery=DeliveryState.STAGED_PRIVATE)
        return PublishPlan(files=True, announce=True)

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.SUCCEEDED

    row = await harness.row(job_id)
    assert (row.state, row.reason, row.delivery_state) == ("succeeded", "published", "available")
    assert (row.current_attempt_id, row.worker_id, row.lease_expires_at) == (None, None, None)
    assert row.finished_at is not None
    assert row.delivery_expires_at - row.finished_at == timedelta(
        seconds=harness.settings.result_ttl_seconds
    )
    assert [f["name"] for f in row.result_ref["files"]] == ["out.txt"]
    assert row.current_stage == "publish"  # announced before publishing
    published = harness.store.published_path("alice", job_id, "out.txt")
    assert published is not None
    assert published.read_bytes() == b"hello"
    assert not harness.store.has_staged(job_id, "out.txt")  # moved, not copied

    [attempt] = await harness.attempts(job_id)
    assert (attempt.id, attempt.outcome, attempt.charged) == (ctx.attempt_id, "succeeded", 1)
    assert attempt.ended_at is not None
    assert await harness.moves(job_id) == [
        ("create", None, "queued"),
        ("claim", "queued", "running"),
        ("publish", "running", "succeeded"),
    ]
    last = (await harness.history(job_id))[-1]
    assert (last.actor, last.attempt_id) == ("worker:w-inproc", ctx.attempt_id)


async def test_permanent_error_fails_the_job_and_blocks_its_private_outputs(
    harness: Harness,
) -> None:
    job_id = await harness.create()

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.write_file("half.txt", b"half")
        await ctx.stage_output(DeliveryState.PARTIAL_PRIVATE)
        raise PermanentError("bad_page", "page 3 cannot be rendered")

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.FAILED

    row = await harness.row(job_id)
    assert (row.state, row.reason, row.delivery_state) == ("failed", "error", "blocked")
    assert row.error == {
        "code": "bad_page",
        "message": "page 3 cannot be rendered",
        "retryable": False,
    }
    assert row.finished_at is not None
    assert row.current_attempt_id is None
    assert row.result_ref is None
    assert not harness.store.has_staged(job_id, "half.txt")  # blocked outputs are removed
    [attempt] = await harness.attempts(job_id)
    assert (attempt.outcome, attempt.error["code"]) == ("failed", "bad_page")
    assert (await harness.moves(job_id))[-1] == ("fail", "running", "failed")


@pytest.mark.parametrize(
    ("raised", "code"),
    [
        (RecoverableError("flaky", "the tile server timed out"), "flaky"),
        (ValueError("input secret=42"), "unexpected_error"),  # anything else: recoverable
    ],
)
async def test_recoverable_error_with_budget_left_retries_later(
    harness: Harness, raised: Exception, code: str
) -> None:
    job_id = await harness.create(max_attempts=3)

    async def handler(ctx: JobContext) -> PublishPlan:
        raise raised

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.RETRY

    row = await harness.row(job_id)
    assert (row.state, row.reason, row.charged_attempts) == ("queued", "retry", 1)
    assert row.last_error["code"] == code
    assert row.last_error["retryable"] is True
    assert "secret" not in row.last_error["message"]  # an unknown error's message is not kept
    assert row.error is None
    assert row.finished_at is None
    assert row.current_attempt_id is None
    # Backoff with full jitter: the first retry waits up to 1 s (default base).
    delay = row.available_at - row.updated_at
    assert timedelta(0) < delay <= timedelta(seconds=1)
    [attempt] = await harness.attempts(job_id)
    assert (attempt.outcome, attempt.charged, attempt.error["code"]) == ("retry", 1, code)
    assert (await harness.moves(job_id))[-1] == ("retry_later", "running", "queued")

    # Not claimable before available_at (however small the jitter drew the delay, a
    # clock set back before it says so); claimable after it, as attempt 2.
    harness.clock.advance(-5)
    assert await harness.claim_all(runner, limit=1) == []
    harness.clock.advance(5 + 1.01)
    again = await harness.claim(runner)
    assert (again.job_id, again.attempt) == (job_id, 2)


async def test_recoverable_error_with_attempts_spent_is_unresolved(harness: Harness) -> None:
    job_id = await harness.create(max_attempts=1)

    async def handler(ctx: JobContext) -> PublishPlan:
        raise RecoverableError("flaky", "still down")

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.UNRESOLVED

    row = await harness.row(job_id)
    assert (row.state, row.reason) == ("unresolved", "retries_exhausted")
    assert row.last_error["code"] == "flaky"
    assert row.current_attempt_id is None
    [attempt] = await harness.attempts(job_id)
    assert (attempt.outcome, attempt.charged) == ("unresolved", 1)
    assert (await harness.moves(job_id))[-1] == ("give_up", "running", "unresolved")
    assert await harness.claim_all(runner, limit=1) == []


async def test_recoverable_error_after_the_elapsed_budget_is_unresolved(harness: Harness) -> None:
    """Attempts are left, but the time budget (counted on database time since creation)
    ran out during the attempt -- within the lease, so the ending is still ours."""
    job_id = await harness.create(max_attempts=5, max_elapsed_seconds=20)

    async def handler(ctx: JobContext) -> PublishPlan:
        harness.clock.advance(21)  # the attempt took longer than the job's whole budget
        raise RecoverableError("flaky", "slow and failing")

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.UNRESOLVED

    row = await harness.row(job_id)
    assert (row.state, row.reason, row.charged_attempts) == ("unresolved", "time_exhausted", 1)
    assert row.last_error["code"] == "flaky"
    assert (await harness.moves(job_id))[-1] == ("give_up", "running", "unresolved")


@pytest.mark.parametrize("learns_by", ["heartbeat", "own_write"])
async def test_cancel_requested_mid_handler_stops_at_the_next_safe_point(
    harness: Harness, learns_by: str
) -> None:
    job_id = await harness.create()
    started, proceed = asyncio.Event(), asyncio.Event()
    after_safe_point: list[str] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.set_plan([("work", "page", 2)])
        await ctx.write_file("p1.txt", b"one")
        await ctx.checkpoint("work", "p1", delivery=DeliveryState.PARTIAL_PRIVATE)
        started.set()
        await proceed.wait()
        if learns_by == "own_write":
            await ctx.checkpoint("work", "p2")  # a fenced write reports the state too
        await ctx.safe_point()
        after_safe_point.append("went on")
        return NO_FILES

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    async with running(runner.run(ctx)) as task:
        await bounded(started.wait())
        async with harness.engine.begin() as conn:
            asked = await harness.transitions.request_cancel(conn, job_id, actor=CLIENT)
        assert isinstance(asked, Applied)
        assert asked.to_state == "cancel_requested"
        if learns_by == "heartbeat":
            beat = Heartbeat(
                harness.engine, harness.transitions, lambda: {job_id: ctx}, lambda _: None
            )
            await bounded(beat.beat_once())
            assert ctx.cancel_requested
        proceed.set()
        assert await bounded(task) == AttemptOutcome.CANCELED

    assert after_safe_point == []
    row = await harness.row(job_id)
    assert (row.state, row.reason, row.delivery_state) == ("canceled", "canceled", "blocked")
    assert row.result_ref is None
    assert row.finished_at is not None
    assert not harness.store.has_staged(job_id, "p1.txt")
    [attempt] = await harness.attempts(job_id)
    assert attempt.outcome == "canceled"
    assert [m for m in await harness.moves(job_id) if m[0] != "create"] == [
        ("claim", "queued", "running"),
        ("request_cancel", "running", "cancel_requested"),
        ("stop_canceled", "cancel_requested", "canceled"),
    ]


async def test_release_on_drain_requeues_without_charging_the_attempt(harness: Harness) -> None:
    job_id = await harness.create(max_attempts=1)  # a charged attempt would spend the budget
    started, proceed = asyncio.Event(), asyncio.Event()

    async def handler(ctx: JobContext) -> PublishPlan:
        started.set()
        await proceed.wait()
        await ctx.safe_point()
        return NO_FILES

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    async with running(runner.run(ctx)) as task:
        await bounded(started.wait())
        ctx.draining = True  # what the pool sets on shutdown
        proceed.set()
        assert await bounded(task) == AttemptOutcome.RELEASED

    row = await harness.row(job_id)
    assert (row.state, row.reason, row.charged_attempts, row.attempt) == ("queued", "retry", 0, 1)
    assert row.current_attempt_id is None
    assert row.last_error is None
    [attempt] = await harness.attempts(job_id)
    assert (attempt.outcome, attempt.charged) == ("released", 0)
    assert (await harness.moves(job_id))[-1] == ("release", "running", "queued")
    # Available at once, and the one allowed attempt is still there to spend.
    again = await harness.claim(runner)
    assert (again.job_id, again.attempt, again.job.charged_attempts) == (job_id, 2, 1)


async def test_a_cancel_that_lands_while_draining_wins_over_the_release(harness: Harness) -> None:
    """The worker has not heard of the cancel yet: its release is refused, and the
    runner stops the job as canceled instead of handing it back against the owner's wish."""
    job_id = await harness.create()
    started, proceed = asyncio.Event(), asyncio.Event()

    async def handler(ctx: JobContext) -> PublishPlan:
        started.set()
        await proceed.wait()
        await ctx.safe_point()
        return NO_FILES

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    async with running(runner.run(ctx)) as task:
        await bounded(started.wait())
        async with harness.engine.begin() as conn:
            assert (await harness.transitions.request_cancel(conn, job_id, actor=CLIENT)).ok
        ctx.draining = True
        proceed.set()
        assert await bounded(task) == AttemptOutcome.CANCELED

    assert (await harness.row(job_id)).state == "canceled"
    assert (await harness.moves(job_id))[-1] == ("stop_canceled", "cancel_requested", "canceled")
    assert [a.outcome for a in await harness.attempts(job_id)] == ["canceled"]


@pytest.mark.parametrize("next_move", ["checkpoint", "publish", "retry", "fail"])
async def test_a_runner_that_lost_its_lease_writes_nothing(
    harness: Harness, next_move: str
) -> None:
    """The lease runs out while the handler is busy; the reaper takes the job back and
    another worker claims it. Whatever the stale runner does next is refused by the
    fence, and the new attempt's rows stay exactly as they were."""
    job_id = await harness.create()
    started, proceed = asyncio.Event(), asyncio.Event()

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.set_plan([("work", "page", 2)])
        await ctx.write_file("out.txt", b"stale")
        started.set()
        await proceed.wait()
        if next_move == "checkpoint":
            await ctx.checkpoint("work", "p1", delivery=DeliveryState.STAGED_PRIVATE)
        elif next_move == "retry":
            raise RecoverableError("flaky", "late failure")
        elif next_move == "fail":
            raise PermanentError("bad", "late failure")
        return PublishPlan(files=True)

    stale_runner = harness.runner({KEY: handler}, worker_id="w-stale")
    stale = await harness.claim(stale_runner, worker_id="w-stale")
    async with running(stale_runner.run(stale)) as task:
        await bounded(started.wait())
        fresh = await harness.steal(job_id, harness.runner({KEY: handler}), worker_id="w-fresh")
        before = await harness.snapshot(job_id)
        proceed.set()
        assert await bounded(task) == AttemptOutcome.LOST

    assert stale.lost
    assert await harness.snapshot(job_id) == before
    row = await harness.row(job_id)
    assert (row.state, row.current_attempt_id, row.worker_id) == (
        "running",
        fresh.attempt_id,
        "w-fresh",
    )
    assert [(a.worker_id, a.outcome) for a in await harness.attempts(job_id)] == [
        ("w-stale", "lost"),
        ("w-fresh", "running"),
    ]
    assert harness.store.published_path("alice", job_id, "out.txt") is None  # nothing published


async def test_staging_partial_after_staged_fails_the_job_as_an_illegal_move(
    harness: Harness,
) -> None:
    job_id = await harness.create()
    reached: list[str] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.write_file("out.txt", b"done")
        await ctx.stage_output(DeliveryState.STAGED_PRIVATE)
        await ctx.stage_output(DeliveryState.PARTIAL_PRIVATE)  # backwards: refused
        reached.append("after the refusal")
        return PublishPlan(files=True)

    runner = harness.runner({KEY: handler})
    ctx = await harness.claim(runner)
    assert await bounded(runner.run(ctx)) == AttemptOutcome.FAILED

    assert reached == []
    assert not ctx.lost  # refused while still holding the job: not a lost lease
    row = await harness.row(job_id)
    assert (row.state, row.delivery_state) == ("failed", "blocked")
    assert row.error["code"] == "illegal_move"
    assert row.error["retryable"] is False
    assert [a.outcome for a in await harness.attempts(job_id)] == ["failed"]
    assert (await harness.moves(job_id))[-1] == ("fail", "running", "failed")
    assert harness.store.published_path("alice", job_id, "out.txt") is None


@pytest.mark.parametrize("files", [True, False], ids=["files", "file-less"])
@pytest.mark.parametrize("group_commit", [True, False], ids=["completer", "single"])
async def test_a_partial_package_handed_to_publication_fails_as_an_illegal_move(
    harness: Harness, files: bool, group_commit: bool
) -> None:
    """Publication refuses a partial package (never published). The attempt still holds
    the job, so this is a handler defect -- ``failed`` with ``illegal_move`` -- not a lost
    lease: the job must not be left running for the reaper to retry again and again, and
    no file may stay in the owner's area."""
    job_id = await harness.create()

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.write_file("half.txt", b"half")
        await ctx.stage_output(DeliveryState.PARTIAL_PRIVATE)
        return PublishPlan(files=files)

    completer = Completer(
        harness.engine,
        harness.transitions,
        actor=harness.runner({}).actor,
        ttl_seconds=harness.settings.result_ttl_seconds,
    )
    runner = harness.runner({KEY: handler}, completer=completer if group_commit else None)
    ctx = await harness.claim(runner)
    async with running(completer.run()):
        assert await bounded(runner.run(ctx)) == AttemptOutcome.FAILED

    assert not ctx.lost
    row = await harness.row(job_id)
    assert (row.state, row.delivery_state, row.result_ref) == ("failed", "blocked", None)
    assert row.error["code"] == "illegal_move"
    assert [a.outcome for a in await harness.attempts(job_id)] == ["failed"]
    assert (await harness.moves(job_id))[-1] == ("fail", "running", "failed")
    assert harness.store.published_path("alice", job_id, "half.txt") is None
    assert not harness.store.has_staged(job_id, "half.txt")


async def test_a_bundle_killed_between_its_publication_rename_and_commit_is_published_later(
    harness: Harness,
) -> None:
    """Chaos (kill -9 storm) found it: a worker killed after moving the staged files into
    the owner's area but before the publication committed left a job whose units are
    checkpointed but whose staged files are gone. The next attempt rebuilds them -- without
    asking delivery to go back from ``staged_private`` to ``partial_private`` (refused,
    which failed the job as ``illegal_move``) -- and publishes."""
    harness = dataclasses.replace(
        harness, settings=harness.settings.model_copy(update={"bundle_time_scale": 0.0})
    )
    key = "atlas.bundle@1"
    bundle = registry()[key]
    async with harness.engine.begin() as conn:
        created = await harness.transitions.create(
            conn,
            NewJob(
                owner="alice",
                kind="atlas.bundle",
                kind_version=1,
                input={
                    "preset": "coast",
                    "pages": ["cover", "summary"],
                    "format": "text-bundle-v1",
                },
                max_attempts=3,
                max_elapsed_seconds=3600,
            ),
            actor=CLIENT,
        )
    job_id = created.job.id
    runner = harness.runner({key: bundle})
    first = await harness.claim(runner)
    await bounded(bundle(first))  # built and packaged: the package is staged
    assert (await harness.row(job_id)).delivery_state == "staged_private"
    harness.store.publish("alice", job_id)  # the rename; the process dies before the commit

    second = await harness.steal(job_id, runner, worker_id="w-next")
    assert await bounded(runner.run(second)) == AttemptOutcome.SUCCEEDED
    row = await harness.row(job_id)
    assert (row.state, row.delivery_state) == ("succeeded", "available")
    names = {f["name"] for f in row.result_ref["files"]}
    assert {"bundle.zip", "manifest.json", "cover-title.txt"} <= names
    assert harness.store.published_path("alice", job_id, "bundle.zip") is not None
