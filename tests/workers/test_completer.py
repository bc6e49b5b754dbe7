""":class:`~atlas_jobs._workers.completer.Completer` in process: file-less publications that finish
together are committed together, in ONE statement, each job answered with its own
outcome."""

from __future__ import annotations

import asyncio

from atlas_jobs._app.lifecycle import AttemptOutcome
from tests.sent_statements import statements
from tests.workers.inprocess import KEY, WORKER_ID, Harness, bounded, not_run, running
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan

N = 8


def _completer(harness: Harness) -> Completer:
    return Completer(
        harness.engine,
        harness.transitions,
        actor=harness.runner({}).actor,
        ttl_seconds=harness.settings.result_ttl_seconds,
    )


async def test_concurrent_publications_join_one_flush_and_a_fenced_out_one_is_refused(
    harness: Harness,
) -> None:
    runner = harness.runner({KEY: not_run})
    # One attempt that lost its job to another worker (lease expired, rescued, reclaimed)...
    stale_job = await harness.create()
    stale = await harness.claim(runner, worker_id="w-stale")
    fresh = await harness.steal(stale_job, runner, worker_id="w-fresh")
    # ...among N attempts that hold theirs.
    for _ in range(N):
        await harness.create()
    held = await harness.claim_all(runner, limit=N)
    assert len(held) == N
    contexts = [*held[: N // 2], stale, *held[N // 2 :]]
    stale_before = await harness.snapshot(stale_job)

    completer = _completer(harness)
    async with running(completer.run()):
        with statements(harness.engine) as sent:
            results = await bounded(asyncio.gather(*(completer.publish(c) for c in contexts)))

    assert results == [c is not stale for c in contexts]
    # One statement for N + 1 jobs, history and attempts included; the refused one is
    # tried once more on its own (Executor.apply: a refusal gets a second look under a
    # fresh snapshot, in case the row changed while the statement waited for its lock).
    assert len(sent) == 2, sent
    assert all(s.startswith("WITH input AS") for s in sent), sent
    for ctx in held:
        row = await harness.row(ctx.job_id)
        assert (row.state, row.delivery_state, row.result_ref) == (
            "succeeded",
            "available",
            {"files": []},
        )
        assert [a.outcome for a in await harness.attempts(ctx.job_id)] == ["succeeded"]
        last = (await harness.history(ctx.job_id))[-1]
        assert (last.transition, last.actor, last.attempt_id) == (
            "publish",
            f"worker:{WORKER_ID}",
            ctx.attempt_id,
        )
    assert await harness.snapshot(stale_job) == stale_before
    assert (await harness.row(stale_job)).current_attempt_id == fresh.attempt_id


async def test_an_idle_completer_publishes_a_lone_job_at_once(harness: Harness) -> None:
    job_id = await harness.create()
    ctx = await harness.claim(harness.runner({KEY: not_run}))
    completer = _completer(harness)
    async with running(completer.run()):
        assert await bounded(completer.publish(ctx)) is True
    assert (await harness.row(job_id)).state == "succeeded"
    assert await completer.flush_once() == 0  # nothing left behind


async def test_runners_with_a_completer_publish_file_less_results_in_one_batch(
    harness: Harness,
) -> None:
    """The path the pool takes: ``JobRunner`` hands a file-less result to the completer,
    and N jobs finishing together cost one publish statement."""
    for _ in range(N):
        await harness.create()

    async def handler(ctx: JobContext) -> PublishPlan:
        return NO_FILES

    completer = _completer(harness)
    runner = harness.runner({KEY: handler}, completer=completer)
    contexts = await harness.claim_all(runner, limit=N)
    async with running(completer.run()):
        with statements(harness.engine) as sent:
            outcomes = await bounded(asyncio.gather(*(runner.run(c) for c in contexts)))

    assert outcomes == [AttemptOutcome.SUCCEEDED] * N
    assert len(sent) == 1, sent
    assert sent[0].startswith("WITH input AS"), sent
    for ctx in contexts:
        assert (await harness.moves(ctx.job_id))[-1] == ("publish", "running", "succeeded")
