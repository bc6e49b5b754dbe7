"""Publication against cancellation: two transactions on two connections, one winner.

**What "winner" means.** A round ends with exactly one of:

* *publication won*: the job is ``succeeded`` with delivery ``available`` and a result
  reference. The cancel either found the job already terminal (``Rejected`` with the
  current state ``succeeded``, plus a ``cancel_too_late`` history row: the late request
  stays visible) or was recorded first as ``cancel_requested`` and the publisher, which
  still held the lease, published anyway (docs/protocol.md §2.3: ``cancel_requested -> succeeded``,
  "publication committed first" -- j-44);
* *cancellation won*: the job is ``canceled``, with no result reference and delivery
  never ``available``; the publisher saw ``cancel_requested`` under the row lock and
  stopped at its safe point instead of publishing.

Never both: no client can read ``canceled`` next to a published result, and the loser's
answer always names the winner's state. The worker decides under the row lock (taken by
``lock_for_publication``), so whatever it read cannot change before it commits.

The lock-ordering tests (after Absurd's ``test_lock_ordering.py``) make the two orders
deterministic: one transaction holds the row, the other starts, we wait on
``pg_stat_activity`` until its backend is blocked on a lock, then the first commits.
"""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections import Counter
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.db.schema import job_history
from atlas_jobs._app.db.schema import jobs as jobs_table
from atlas_jobs._app.lifecycle import DeliveryState, JobState
from atlas_jobs._app.transitions import Applied, Rejected, RejectReason, Transitions
from tests.factory import CLIENT, WORKER, JobFactory

ROUNDS = 200
SEED = int(os.environ.get("ATLAS_RACE_SEED", random.randrange(2**32)))
PAUSES = (0.0, 0.0, 0.0005, 0.001, 0.002, 0.004)


async def pause(rng: random.Random) -> None:
    await asyncio.sleep(rng.choice(PAUSES))


async def publisher(
    engine: AsyncEngine,
    t: Transitions,
    job_id: uuid.UUID,
    attempt: uuid.UUID,
    rng: random.Random,
    *,
    stops_when_asked: bool,
) -> tuple[JobState, Any]:
    """The worker's last step: lock, look, then publish -- or stop, if it honours a
    cancel request that arrived before publication started."""
    await pause(rng)
    async with engine.begin() as conn:
        assert await t.lock_for_publication(conn, job_id, attempt)
        seen = JobState(
            (
                await conn.execute(select(jobs_table.c.state).where(jobs_table.c.id == job_id))
            ).scalar_one()
        )
        await pause(rng)  # making the bundle owner-retrievable takes a moment
        if stops_when_asked and seen == JobState.CANCEL_REQUESTED:
            return seen, await t.stop_canceled(conn, job_id, attempt, actor=WORKER)
        return seen, await t.publish(
            conn, job_id, attempt, result_ref={"bundle": "b"}, ttl_seconds=60, actor=WORKER
        )


async def canceler(
    engine: AsyncEngine, t: Transitions, job_id: uuid.UUID, rng: random.Random
) -> Any:
    await pause(rng)
    async with engine.begin() as conn:
        outcome = await t.request_cancel(conn, job_id, actor=CLIENT, request_id="cancel-1")
        await pause(rng)  # hold the row a little, as a slow request would
        return outcome


async def history_of(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_history).where(job_history.c.job_id == job_id).order_by(job_history.c.seq)
        )
        return list(rows)


async def test_publish_and_cancel_race_has_exactly_one_winner(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    rng = random.Random(SEED)
    seen: Counter[str] = Counter()
    for round_ in range(ROUNDS):
        made = await jobs.make(JobState.RUNNING)
        assert made.attempt_id is not None
        stops_when_asked = rng.random() < 0.5
        racers = [
            publisher(
                engine,
                transitions,
                made.id,
                made.attempt_id,
                rng,
                stops_when_asked=stops_when_asked,
            ),
            canceler(engine, transitions, made.id, rng),
        ]
        rng.shuffle(racers)
        first, second = await asyncio.gather(*racers)
        (worker_saw, worker_outcome), cancel = (
            (first, second) if isinstance(first, tuple) else (second, first)
        )
        row = await jobs.row(made.id)
        history = await history_of(engine, made.id)
        context = f"round {round_} (ATLAS_RACE_SEED={SEED})"

        assert isinstance(worker_outcome, Applied), context
        terminal_rows = [
            h
            for h in history
            if h.to_state != h.from_state
            and h.to_state
            in {
                "succeeded",
                "canceled",
                "failed",
            }
        ]
        assert len(terminal_rows) == 1, context

        if row.state == JobState.SUCCEEDED:
            assert row.delivery_state == DeliveryState.AVAILABLE, context
            assert row.result_ref == {"bundle": "b"}, context
            if isinstance(cancel, Rejected):  # the cancel came after the commit
                assert cancel == Rejected(
                    "request_cancel", RejectReason.ILLEGAL, JobState.SUCCEEDED
                ), context
                late = history[-1]
                assert (late.reason, late.from_state, late.to_state, late.event_id) == (
                    "cancel_too_late",
                    "succeeded",
                    "succeeded",
                    "cancel-1",
                ), context
                seen["publication committed before the cancel"] += 1
            else:  # recorded first, yet the lease holder published: allowed (protocol §5)
                assert cancel.to_state == JobState.CANCEL_REQUESTED, context
                assert worker_saw == JobState.CANCEL_REQUESTED, context
                assert not stops_when_asked, context
                assert [h.to_state for h in history][-2:] == ["cancel_requested", "succeeded"]
                seen["publication won over a recorded cancel"] += 1
        else:
            assert row.state == JobState.CANCELED, context
            assert row.delivery_state != DeliveryState.AVAILABLE, context
            assert row.result_ref is None, context
            assert isinstance(cancel, Applied), context
            assert cancel.to_state == JobState.CANCEL_REQUESTED, context
            assert worker_saw == JobState.CANCEL_REQUESTED, context
            assert stops_when_asked, context
            assert worker_outcome.transition == "stop_canceled", context
            seen["cancellation won"] += 1

    # Both orders really happened (the race was raced, not serialized by accident).
    assert seen["publication committed before the cancel"] > 0, seen
    assert seen["publication won over a recorded cancel"] > 0, seen
    assert seen["cancellation won"] > 0, seen


# -- deterministic lock ordering ------------------------------------------------------


async def backend_pid(conn: AsyncConnection) -> int:
    return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def wait_until_blocked_on_lock(engine: AsyncEngine, pid: int) -> None:
    """Poll ``pg_stat_activity`` until backend ``pid`` waits for a lock."""
    async with engine.connect() as observer:
        for _ in range(2000):
            waiting = (
                await observer.execute(
                    text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                    {"pid": pid},
                )
            ).scalar_one_or_none()
            await observer.rollback()  # a fresh snapshot of pg_stat_activity each time
            if waiting == "Lock":
                return
            await asyncio.sleep(0.005)
    raise AssertionError(f"backend {pid} never blocked on the job row lock")


async def test_cancel_waits_for_publication_and_sees_it_won(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.connect() as publishing, engine.connect() as canceling:
        await publishing.begin()
        assert await transitions.lock_for_publication(publishing, made.id, made.attempt_id)

        await canceling.begin()
        pid = await backend_pid(canceling)
        cancel = asyncio.create_task(transitions.request_cancel(canceling, made.id, actor=CLIENT))
        await wait_until_blocked_on_lock(engine, pid)
        assert not cancel.done()

        published = await transitions.publish(
            publishing, made.id, made.attempt_id, result_ref={"b": 1}, ttl_seconds=60, actor=WORKER
        )
        assert isinstance(published, Applied)
        await publishing.commit()

        outcome = await cancel
        await canceling.commit()
    assert outcome == Rejected("request_cancel", RejectReason.ILLEGAL, JobState.SUCCEEDED)
    row = await jobs.row(made.id)
    assert (row.state, row.delivery_state, row.cancel) == ("succeeded", "available", None)
    history = await history_of(engine, made.id)
    assert [(h.transition, h.to_state, h.reason) for h in history[-2:]] == [
        ("publish", "succeeded", "published"),
        ("request_cancel", "succeeded", "cancel_too_late"),
    ]


async def test_publication_waits_for_a_cancel_and_still_wins(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """j-44 the other way round: the cancel commits first, the lease holder then locks
    the row, finds ``cancel_requested`` and publishes (the cancel is visible, it lost)."""
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.connect() as canceling, engine.connect() as publishing:
        await canceling.begin()
        requested = await transitions.request_cancel(canceling, made.id, actor=CLIENT)
        assert isinstance(requested, Applied)

        await publishing.begin()
        pid = await backend_pid(publishing)
        lock = asyncio.create_task(
            transitions.lock_for_publication(publishing, made.id, made.attempt_id)
        )
        await wait_until_blocked_on_lock(engine, pid)
        assert not lock.done()
        await canceling.commit()

        assert await lock
        published = await transitions.publish(
            publishing, made.id, made.attempt_id, result_ref={"b": 1}, ttl_seconds=60, actor=WORKER
        )
        await publishing.commit()
    assert isinstance(published, Applied)
    assert published.from_state == JobState.CANCEL_REQUESTED
    row = await jobs.row(made.id)
    assert (row.state, row.delivery_state) == ("succeeded", "available")
    assert [h.to_state for h in await history_of(engine, made.id)] == [
        "queued",
        "running",
        "cancel_requested",
        "succeeded",
    ]


async def test_publication_after_a_rolled_back_cancel_sees_running(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.connect() as canceling, engine.connect() as publishing:
        await canceling.begin()
        assert isinstance(
            await transitions.request_cancel(canceling, made.id, actor=CLIENT), Applied
        )
        await publishing.begin()
        pid = await backend_pid(publishing)
        lock = asyncio.create_task(
            transitions.lock_for_publication(publishing, made.id, made.attempt_id)
        )
        await wait_until_blocked_on_lock(engine, pid)
        await canceling.rollback()
        assert await lock
        published = await transitions.publish(
            publishing, made.id, made.attempt_id, result_ref={"b": 1}, ttl_seconds=60, actor=WORKER
        )
        await publishing.commit()
    assert isinstance(published, Applied)
    assert published.from_state == JobState.RUNNING
    assert [h.to_state for h in await history_of(engine, made.id)] == [
        "queued",
        "running",
        "succeeded",
    ]


async def test_a_cancel_that_waited_for_a_claim_moves_the_job_from_running(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """The chaos model (scenario 11) found a 500 here: the cancel's statement took its
    snapshot while the job was ``queued``, then waited for the claim's lock; the row it
    locked was ``running`` but the statement still moved it as ``queued`` -> ``canceled``
    and kept the lease (``ck_jobs_lease_iff_active``). It must move what it locked:
    ``running`` -> ``cancel_requested``, with that source in the history."""
    made = await jobs.make(JobState.QUEUED)
    async with engine.connect() as claiming, engine.connect() as canceling:
        await claiming.begin()
        [claimed] = await transitions.claim(
            claiming, worker_id="w-race", handlers=[made.handler], limit=1
        )
        assert claimed.id == made.id

        await canceling.begin()
        # The snapshot is taken before the claim commits: the job is queued in it.
        await canceling.execute(text("SELECT 1"))
        pid = await backend_pid(canceling)
        cancel = asyncio.create_task(transitions.request_cancel(canceling, made.id, actor=CLIENT))
        await wait_until_blocked_on_lock(engine, pid)
        await claiming.commit()

        outcome = await cancel
        await canceling.commit()
    assert isinstance(outcome, Applied)
    assert (outcome.from_state, outcome.to_state) == (JobState.RUNNING, JobState.CANCEL_REQUESTED)
    row = await jobs.row(made.id)
    assert (row.state, row.current_attempt_id) == ("cancel_requested", claimed.current_attempt_id)
    history = await history_of(engine, made.id)
    assert [(h.transition, h.from_state, h.to_state) for h in history[-2:]] == [
        ("claim", "queued", "running"),
        ("request_cancel", "running", "cancel_requested"),
    ]
