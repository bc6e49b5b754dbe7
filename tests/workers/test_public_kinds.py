"""Kinds declared on the public API (``atlas_jobs``), run by the real engine in process:
the per-attempt timeout, plain ``def`` handlers in threads, the retry policy's
classification of exceptions, and what a handler may return."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel

from atlas_jobs import (
    Context,
    LeaseLost,
    PermanentError,
    Result,
    RetryPolicy,
    Stage,
    SyncContext,
    TransientError,
    kind,
)
from atlas_jobs._app.lifecycle import AttemptOutcome
from atlas_jobs._workers.declared import handler_of
from tests.workers.inprocess import CLIENT, KEY, KIND, Harness, bounded, until


class Numbered(BaseModel):
    n: int


class Shape(BaseModel):
    width: int


class ImageError(Exception):
    pass


class BrokenImageError(ImageError):
    pass


async def run_once(harness: Harness, declared: Any, **create: Any) -> tuple[Any, AttemptOutcome]:
    job_id = await harness.create(**create)
    runner = harness.runner({KEY: handler_of(declared)})
    ctx = await harness.claim(runner)
    outcome = await bounded(runner.run(ctx))
    return job_id, outcome


async def last_error(harness: Harness, job_id: Any) -> dict[str, Any]:
    error = (await harness.history(job_id))[-1].data["error"]
    assert isinstance(error, dict)
    return error


async def test_an_attempt_stuck_in_an_await_is_cancelled_at_its_timeout_and_retried(
    harness: Harness,
) -> None:
    stuck = asyncio.Event()

    @kind(KIND, input=Numbered, timeout=0.2)
    async def hangs(ctx: Context[Numbered]) -> None:
        stuck.set()
        await asyncio.Event().wait()  # never set: a dependency that never answers

    job_id, outcome = await run_once(harness, hangs)
    assert stuck.is_set()
    assert outcome == AttemptOutcome.RETRY
    row = await harness.row(job_id)
    assert (row.state, row.reason) == ("queued", "retry")
    assert (row.current_attempt_id, row.lease_expires_at) == (None, None)
    error = await last_error(harness, job_id)
    assert error["code"] == "attempt_timed_out"
    assert error["retryable"] is True
    assert "0.2 s timeout" in error["message"]
    [attempt] = await harness.attempts(job_id)
    assert attempt.outcome == "retry"


async def test_a_plain_def_handler_runs_in_a_thread_and_leaves_the_loop_free(
    harness: Harness,
) -> None:
    threads: list[str] = []

    @kind(KIND, input=Numbered, stages=[Stage("render", "sizes")])
    def renders(ctx: SyncContext[Numbered]) -> Result:
        threads.append(threading.current_thread().name)
        ctx.plan(render=2)
        ctx.enter("render")
        for size in ("small", "large"):
            time.sleep(0.3)  # blocking work: the event loop must not stall on it
            ctx.write_file(f"{size}.txt", f"{size} of {ctx.input.n}".encode())
            ctx.unit_done("render", size, outputs="partial")
        ctx.outputs_complete()
        return Result(files=True)

    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        job_id, outcome = await run_once(harness, renders)
    finally:
        ticker.cancel()
    assert outcome == AttemptOutcome.SUCCEEDED
    assert threads
    assert threads[0].startswith("atlas-job")
    # 0.6 s of blocking in the handler; a stalled loop would not have ticked at all.
    assert ticks >= 5
    stages = await harness.stages(job_id)
    assert (stages["render"].done, stages["render"].total) == (2, 2)
    for size in ("small", "large"):
        path = harness.store.published_path("alice", job_id, f"{size}.txt")
        assert path is not None
        assert path.read_bytes() == f"{size} of 1".encode()


async def test_a_thread_past_its_timeout_is_abandoned_and_writes_nothing_more(
    harness: Harness,
) -> None:
    release = threading.Event()
    later: list[BaseException] = []

    @kind(KIND, input=Numbered, timeout=0.2, stages=[Stage("work", "steps")])
    def blocks(ctx: SyncContext[Numbered]) -> None:
        release.wait(10)
        try:
            ctx.plan(work=1)
        except BaseException as exc:
            later.append(exc)
            raise

    job_id, outcome = await run_once(harness, blocks)
    assert outcome == AttemptOutcome.RETRY
    assert (await last_error(harness, job_id))["code"] == "attempt_timed_out"
    before = await harness.snapshot(job_id)
    release.set()
    await until(lambda: asyncio.sleep(0.05, later), bool)
    assert isinstance(later[0], LeaseLost)
    assert await harness.snapshot(job_id) == before


@pytest.mark.parametrize(
    ("raised", "outcome", "code"),
    [
        (BrokenImageError("pixel 3 is not a pixel"), AttemptOutcome.FAILED, "bad_image"),
        (ImageError("the source is busy"), AttemptOutcome.RETRY, "image_source_busy"),
        (KeyError("width"), AttemptOutcome.RETRY, "unexpected_error"),
        (PermanentError("declined", "the owner declined"), AttemptOutcome.FAILED, "declined"),
        (TransientError("later", "try later"), AttemptOutcome.RETRY, "later"),
    ],
)
async def test_the_retry_policy_classifies_exceptions_and_keeps_their_reason(
    harness: Harness, raised: Exception, outcome: AttemptOutcome, code: str
) -> None:
    """The most specific listed class wins (``BrokenImageError`` is permanent although its base
    is transient); an exception listed nowhere is transient, its class and message kept."""
    policy = RetryPolicy(
        attempts=3,
        transient={ImageError: "image_source_busy"},
        permanent={BrokenImageError: "bad_image"},
    )

    @kind(KIND, input=Numbered, retry=policy)
    async def fails(ctx: Context[Numbered]) -> None:
        raise raised

    job_id, ended = await run_once(harness, fails)
    assert ended == outcome
    error = await last_error(harness, job_id)
    assert error["code"] == code
    assert error["retryable"] is (outcome == AttemptOutcome.RETRY)
    if not isinstance(raised, PermanentError | TransientError):
        assert error["message"] == f"{type(raised).__name__}: {raised}"


@pytest.mark.parametrize(
    ("returned", "result_model"),
    [("done", None), (Result(reference={"width": "wide"}), Shape), (None, Shape)],
)
async def test_a_handler_returning_something_not_a_result_of_its_kind_fails_permanently(
    harness: Harness, returned: object, result_model: type[BaseModel] | None
) -> None:
    @kind(KIND, input=Numbered, result=result_model)
    async def returns(ctx: Context[Numbered]) -> Any:
        return returned

    job_id, outcome = await run_once(harness, returns)
    assert outcome == AttemptOutcome.FAILED
    assert (await last_error(harness, job_id))["code"] == "invalid_result"


async def test_a_typed_result_reference_is_published_with_the_job(harness: Harness) -> None:
    @kind(KIND, input=Numbered, result=Shape)
    async def measures(ctx: Context[Numbered]) -> Result:
        return Result(reference=Shape(width=ctx.input.n * 10))

    job_id, outcome = await run_once(harness, measures)
    assert outcome == AttemptOutcome.SUCCEEDED
    assert (await harness.row(job_id)).result_ref == {"files": [], "width": 10}


async def test_input_that_no_longer_matches_the_model_fails_as_invalid_input(
    harness: Harness,
) -> None:
    @kind(KIND, input=Shape)
    async def never(ctx: Context[Shape]) -> None:
        raise AssertionError("the handler must not run")

    job_id, outcome = await run_once(harness, never)
    assert outcome == AttemptOutcome.FAILED
    assert (await last_error(harness, job_id))["code"] == "invalid_input"


async def test_a_wait_for_a_signal_waits_then_hands_the_event_to_the_next_attempt(
    harness: Harness,
) -> None:
    received: list[Any] = []

    @kind(KIND, input=Numbered)
    async def confirms(ctx: Context[Numbered]) -> None:
        signal = await ctx.wait_for_signal(deadline_seconds=60, on_deadline="escalate")
        received.append((signal.event_id, signal.data))

    job_id = await harness.create()
    runner = harness.runner({KEY: handler_of(confirms)})
    assert await bounded(runner.run(await harness.claim(runner))) == AttemptOutcome.WAITING
    row = await harness.row(job_id)
    assert (row.state, row.reason) == ("waiting", "external")
    assert received == []

    async with harness.engine.begin() as conn:
        await harness.transitions.signal(
            conn, job_id, event_id="evt-7", actor=CLIENT, data={"receipt": "R-7"}
        )
    assert await bounded(runner.run(await harness.claim(runner))) == AttemptOutcome.SUCCEEDED
    assert received == [("evt-7", {"receipt": "R-7"})]
