""":class:`~atlas_jobs._workers.context.JobContext` in process: checkpoints across attempts, plan
expansion, and the fence that keeps a lost attempt from writing anything."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from atlas_jobs._app.lifecycle import AttemptOutcome, DeliveryState
from tests.workers.inprocess import KEY, LEASE, Harness, bounded, not_run, running
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import LeaseLost, RecoverableError
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan

UNITS = ("t1", "t2", "t3")


async def test_checkpoints_of_a_failed_attempt_are_done_for_the_retry(harness: Harness) -> None:
    job_id = await harness.create()
    worked: dict[int, list[str]] = {}

    async def handler(ctx: JobContext) -> PublishPlan:
        await ctx.load_checkpoints()
        await ctx.set_plan([("build", "tile", len(UNITS))])
        did = worked.setdefault(ctx.attempt, [])
        for unit in UNITS:
            if ctx.done("build", unit):
                continue
            if ctx.attempt == 1 and unit == "t3":
                raise RecoverableError("flaky", "t3 failed")
            await ctx.checkpoint("build", unit, data={"by": ctx.attempt})
            did.append(unit)
            assert ctx.done("build", unit)  # this attempt's own checkpoints count too
        return NO_FILES

    runner = harness.runner({KEY: handler})
    first = await harness.claim(runner)
    assert await bounded(runner.run(first)) == AttemptOutcome.RETRY
    assert (await harness.stages(job_id))["build"].done == 2

    harness.clock.advance(2)  # past the backoff
    second = await harness.claim(runner)
    assert second.attempt == 2
    assert await bounded(runner.run(second)) == AttemptOutcome.SUCCEEDED

    assert worked == {1: ["t1", "t2"], 2: ["t3"]}
    stage = (await harness.stages(job_id))["build"]
    assert (stage.done, stage.total, stage.plan_revision) == (3, 3, 1)  # plan kept
    checkpoints = await harness.checkpoints(job_id)
    assert {unit: (c.attempt_id, c.data) for (_, unit), c in checkpoints.items()} == {
        "t1": (first.attempt_id, {"by": 1}),
        "t2": (first.attempt_id, {"by": 1}),
        "t3": (second.attempt_id, {"by": 2}),
    }
    assert [(a.number, a.outcome) for a in await harness.attempts(job_id)] == [
        (1, "retry"),
        (2, "succeeded"),
    ]


async def test_a_redone_unit_is_counted_once(harness: Harness) -> None:
    """A unit checkpointed again (redone by code that did not consult ``done``) counts
    once, and its first checkpoint stays."""
    job_id = await harness.create()
    runner = harness.runner({KEY: not_run})
    ctx = await harness.claim(runner)
    await ctx.set_plan([("build", "tile", 2)])
    await ctx.checkpoint("build", "t1", data={"v": 1})
    await ctx.checkpoint("build", "t1", data={"v": 2})

    assert (await harness.stages(job_id))["build"].done == 1
    assert (await harness.checkpoints(job_id))[("build", "t1")].data == {"v": 1}


async def test_expand_plan_bumps_the_revision_once_for_the_same_total(harness: Harness) -> None:
    job_id = await harness.create()
    runner = harness.runner({KEY: not_run})
    ctx = await harness.claim(runner)
    await ctx.set_plan([("build", "tile", 4)])
    await ctx.checkpoint("build", "t1")
    before = await harness.row(job_id)
    assert before.plan_revision == 1

    await ctx.expand_plan("build", 6)
    expanded = await harness.row(job_id)
    assert expanded.plan_revision == 2
    assert expanded.version == before.version + 1

    await ctx.expand_plan("build", 6)  # rediscovered (a retry would do the same)
    again = await harness.row(job_id)
    assert (again.plan_revision, again.version) == (2, expanded.version)
    assert again.lease_expires_at >= expanded.lease_expires_at  # still a fenced beat

    stage = (await harness.stages(job_id))["build"]
    assert (stage.total, stage.done, stage.plan_revision) == (6, 1, 2)  # done units kept
    expansions = [h for h in await harness.history(job_id) if h.transition == "expand_plan"]
    assert len(expansions) == 1
    assert expansions[0].data == {"stage": "build", "total": 6}
    assert expansions[0].attempt_id == ctx.attempt_id


async def test_a_repeated_expansion_is_still_fenced(harness: Harness) -> None:
    """The no-op path of a repeated expansion checks the fence too: a stale attempt
    learns it lost the job there, and writes nothing."""
    job_id = await harness.create()
    runner = harness.runner({KEY: not_run})
    stale = await harness.claim(runner)
    await stale.set_plan([("build", "tile", 4)])
    await stale.expand_plan("build", 6)
    await harness.steal(job_id, runner, worker_id="w-fresh")
    before = await harness.snapshot(job_id)

    with pytest.raises(LeaseLost):
        await stale.expand_plan("build", 6)

    assert stale.lost
    assert await harness.snapshot(job_id) == before


def _writes(ctx: JobContext) -> dict[str, Callable[[], Awaitable[object]]]:
    return {
        "set_plan": lambda: ctx.set_plan([("other", "unit", 1)]),
        "enter_stage": lambda: ctx.enter_stage("build"),
        "checkpoint": lambda: ctx.checkpoint("build", "t2", data={"x": 1}),
        "expand_plan": lambda: ctx.expand_plan("build", 9),
        "stage_output": lambda: ctx.stage_output(DeliveryState.STAGED_PRIVATE),
        "write_file": lambda: ctx.write_file("late.txt", b"late"),
        "safe_point": ctx.safe_point,
        "sleep": lambda: ctx.sleep(0),
    }


async def test_after_mark_lost_every_write_raises_lease_lost_and_writes_nothing(
    harness: Harness,
) -> None:
    job_id = await harness.create()
    ctx = await harness.claim(harness.runner({KEY: not_run}))
    await ctx.set_plan([("build", "tile", 4)])
    await ctx.checkpoint("build", "t1", delivery=DeliveryState.PARTIAL_PRIVATE)
    before = await harness.snapshot(job_id)

    ctx.mark_lost()  # what the heartbeat does when it finds the lease gone
    for name, write in _writes(ctx).items():
        with pytest.raises(LeaseLost):
            await write()
        assert await harness.snapshot(job_id) == before, name
    assert not harness.store.has_staged(job_id, "late.txt")
    # The job itself is untouched: still running on this attempt, for the reaper.
    row = await harness.row(job_id)
    assert (row.state, row.current_attempt_id) == ("running", ctx.attempt_id)


async def test_a_write_after_the_lease_expired_is_refused_and_marks_the_context_lost(
    harness: Harness,
) -> None:
    """Nobody told the context (no heartbeat): the fence in the database refuses."""
    job_id = await harness.create()
    ctx = await harness.claim(harness.runner({KEY: not_run}))
    await ctx.set_plan([("build", "tile", 4)])
    harness.clock.advance(LEASE + 1)
    before = await harness.snapshot(job_id)

    with pytest.raises(LeaseLost):
        await ctx.checkpoint("build", "t1")

    assert ctx.lost
    assert await harness.snapshot(job_id) == before
    with pytest.raises(LeaseLost):  # and from now on it does not even ask
        await ctx.safe_point()


async def test_mark_lost_interrupts_a_simulated_unit_of_work(harness: Harness) -> None:
    await harness.create()
    ctx = await harness.claim(harness.runner({KEY: not_run}))
    async with running(ctx.sleep(3600)) as sleeping:
        await asyncio.sleep(0)  # let it start waiting
        assert not sleeping.done()
        ctx.mark_lost()
        with pytest.raises(LeaseLost):
            await bounded(sleeping)
