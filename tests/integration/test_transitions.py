"""The transition service against a real PostgreSQL: typed outcomes, fencing, history.

Every test states the row before and after, so a move that "did nothing" is told
apart from one that did the wrong thing.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import attempts, job_history, job_stages
from atlas_jobs._app.lifecycle import TERMINAL_STATES, DeliveryState, JobState, Reason
from atlas_jobs._app.transitions import (
    Actor,
    Applied,
    MoveResult,
    NewJob,
    Rejected,
    RejectReason,
    Transitions,
    error_doc,
)
from tests.factory import CLIENT, WORKER, JobFactory, MadeJob

OPERATOR = Actor("operator", "ops")
REVIEWER = Actor("reviewer", "rita")
ERROR = error_doc("boom", "permanent", retryable=False)
FLAKY = error_doc("flaky", "try again", retryable=True)
LEASE = 30  # the ``transitions`` fixture's lease


async def history(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_history).where(job_history.c.job_id == job_id).order_by(job_history.c.seq)
        )
        return list(rows)


async def moves(engine: AsyncEngine, job_id: uuid.UUID) -> list[tuple[str, str | None, str]]:
    return [(h.transition, h.from_state, h.to_state) for h in await history(engine, job_id)]


async def snapshot(engine: AsyncEngine, job_id: uuid.UUID) -> tuple[Any, ...]:
    """Everything a transition could touch: the row, history, attempts, progress."""
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM jobs WHERE id = :id"), {"id": job_id})).one()
        counts = []
        for table in (job_history, attempts, job_stages):
            counts.append(
                (
                    await conn.execute(
                        select(func.count()).select_from(table).where(table.c.job_id == job_id)
                    )
                ).scalar_one()
            )
        stages = list(await conn.execute(select(job_stages).where(job_stages.c.job_id == job_id)))
        tries = list(await conn.execute(select(attempts).where(attempts.c.job_id == job_id)))
    return (tuple(row), tuple(counts), sorted(map(tuple, stages)), sorted(map(tuple, tries)))


async def claim_one(engine: AsyncEngine, t: Transitions, made: MadeJob) -> uuid.UUID:
    async with engine.begin() as conn:
        [row] = await t.claim(conn, worker_id="w-2", handlers=[made.handler], limit=5)
    assert row.id == made.id
    return uuid.UUID(str(row.current_attempt_id))


async def rescue_after_lease(
    engine: AsyncEngine, t: Transitions, clock: Clock, job_id: uuid.UUID
) -> MoveResult:
    clock.advance(LEASE + 1)
    async with engine.begin() as conn:
        return await t.rescue(conn, job_id, backoff_seconds=0)


# -- typed outcomes -------------------------------------------------------------------

Call = Callable[[Transitions, AsyncConnection, uuid.UUID, uuid.UUID], Awaitable[Any]]

CALLS: dict[str, Call] = {
    "request_cancel": lambda t, c, j, a: t.request_cancel(c, j, actor=CLIENT),
    "approve": lambda t, c, j, a: t.approve(c, j, actor=REVIEWER),
    "reject": lambda t, c, j, a: t.reject(c, j, actor=REVIEWER),
    "resume": lambda t, c, j, a: t.resume(c, j, actor=OPERATOR),
    "operator_cancel": lambda t, c, j, a: t.operator_decide(
        c, j, decision="cancel", actor=OPERATOR
    ),
    "operator_fail": lambda t, c, j, a: t.operator_decide(c, j, decision="fail", actor=OPERATOR),
    "replay": lambda t, c, j, a: t.replay(c, j, actor=OPERATOR),
    "expire_result": lambda t, c, j, a: t.expire_result(c, j),
    "rescue": lambda t, c, j, a: t.rescue(c, j, backoff_seconds=0),
    "record_progress": lambda t, c, j, a: t.record_progress(c, j, a, "build", "u1", actor=WORKER),
    "expand_plan": lambda t, c, j, a: t.expand_plan(c, j, a, "build", 9, actor=WORKER),
    "stage_output": lambda t, c, j, a: t.stage_output(
        c, j, a, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
    ),
    "retry_later": lambda t, c, j, a: t.retry_later(
        c, j, a, error=FLAKY, delay_seconds=0, actor=WORKER
    ),
    "release": lambda t, c, j, a: t.release(c, j, a, actor=WORKER),
    "give_up": lambda t, c, j, a: t.give_up(
        c, j, a, error=FLAKY, reason=Reason.RETRIES_EXHAUSTED, actor=WORKER
    ),
    "wait": lambda t, c, j, a: t.wait(
        c, j, a, reason=Reason.REVIEW, deadline_seconds=60, on_deadline="fail", actor=WORKER
    ),
    "stop_canceled": lambda t, c, j, a: t.stop_canceled(c, j, a, actor=WORKER),
    "publish": lambda t, c, j, a: t.publish(
        c, j, a, result_ref={"files": []}, ttl_seconds=60, actor=WORKER
    ),
    "fail": lambda t, c, j, a: t.fail(c, j, a, error=ERROR, actor=WORKER),
}


async def test_unknown_job_is_not_found(engine: AsyncEngine, transitions: Transitions) -> None:
    for name, call in CALLS.items():
        async with engine.begin() as conn:
            outcome = await call(transitions, conn, uuid.uuid4(), uuid.uuid4())
        assert outcome == Rejected(outcome.transition, RejectReason.NOT_FOUND), name
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(job_history))).scalar() == 0


ILLEGAL = [
    (JobState.QUEUED, "publish"),
    (JobState.QUEUED, "fail"),
    (JobState.QUEUED, "approve"),
    (JobState.QUEUED, "resume"),
    (JobState.QUEUED, "replay"),
    (JobState.QUEUED, "expire_result"),
    (JobState.QUEUED, "rescue"),
    (JobState.QUEUED, "record_progress"),
    (JobState.RUNNING, "resume"),
    (JobState.RUNNING, "approve"),
    (JobState.RUNNING, "stop_canceled"),
    (JobState.RUNNING, "replay"),
    (JobState.RUNNING, "rescue"),  # the lease is live
    (JobState.WAITING, "publish"),
    (JobState.WAITING, "resume"),
    (JobState.UNRESOLVED, "approve"),
    (JobState.UNRESOLVED, "request_cancel"),
    (JobState.CANCEL_REQUESTED, "request_cancel"),
    (JobState.CANCEL_REQUESTED, "retry_later"),
    (JobState.CANCEL_REQUESTED, "wait"),
    (JobState.CANCEL_REQUESTED, "give_up"),
]


async def test_illegal_moves_are_rejected_and_change_nothing(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    for state, name in ILLEGAL:
        made = await jobs.make(state)
        attempt = made.attempt_id or uuid.uuid4()
        before = await snapshot(engine, made.id)
        async with engine.begin() as conn:
            outcome = await CALLS[name](transitions, conn, made.id, attempt)
        assert outcome == Rejected(outcome.transition, RejectReason.ILLEGAL, state), (state, name)
        assert await snapshot(engine, made.id) == before, (state, name)


async def test_claim_takes_only_queued_jobs(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    running = await jobs.make(JobState.RUNNING)
    queued = await jobs.make(JobState.QUEUED)
    before = await snapshot(engine, running.id)
    async with engine.begin() as conn:
        claimed = await transitions.claim(
            conn, worker_id="w-2", handlers=[running.handler, queued.handler], limit=10
        )
    assert [row.id for row in claimed] == [queued.id]
    assert await snapshot(engine, running.id) == before


async def test_claim_skips_kinds_the_worker_cannot_run(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.QUEUED)
    async with engine.begin() as conn:
        assert await transitions.claim(conn, worker_id="w", handlers=["other@1"], limit=5) == []
        assert (
            await transitions.claim(conn, worker_id="w", handlers=[f"{made.kind}@2"], limit=5) == []
        )
        assert (await jobs.row(made.id)).state == "queued"


async def test_claim_opens_a_new_attempt_with_history(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    row = await jobs.row(made.id)
    assert (row.state, row.reason, row.attempt, row.charged_attempts) == (
        "running",
        "claimed",
        1,
        1,
    )
    assert row.lease_expires_at is not None
    assert row.worker_id == "w-test"
    async with engine.connect() as conn:
        [opened] = await conn.execute(select(attempts).where(attempts.c.job_id == made.id))
    assert (opened.id, opened.number, opened.outcome) == (made.attempt_id, 1, "running")
    [_, claim] = await history(engine, made.id)
    assert (claim.transition, claim.from_state, claim.to_state) == ("claim", "queued", "running")
    assert claim.attempt_id == made.attempt_id


# -- fencing: a stale attempt changes nothing ----------------------------------------


async def test_stale_attempt_after_rescue_can_change_nothing(
    engine: AsyncEngine, transitions: Transitions, clock: Clock, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    old = made.attempt_id
    assert old is not None
    async with engine.begin() as conn:
        await transitions.set_plan(conn, made.id, old, [("build", "tiles", 4)], actor=WORKER)
    rescued = await rescue_after_lease(engine, transitions, clock, made.id)
    assert isinstance(rescued, Applied)
    assert rescued.to_state == JobState.QUEUED
    new = await claim_one(engine, transitions, made)
    assert new != old
    before = await snapshot(engine, made.id)

    async with engine.begin() as conn:
        assert await transitions.heartbeat(conn, made.id, old) is None
        assert not await transitions.lock_for_publication(conn, made.id, old)
    for name in ("record_progress", "expand_plan", "stage_output", "publish", "fail"):
        async with engine.begin() as conn:
            outcome = await CALLS[name](transitions, conn, made.id, old)
        assert outcome == Rejected(name, RejectReason.STALE_ATTEMPT, JobState.RUNNING), name
    for name in ("retry_later", "release", "give_up", "wait"):
        async with engine.begin() as conn:
            outcome = await CALLS[name](transitions, conn, made.id, old)
        assert outcome == Rejected(name, RejectReason.STALE_ATTEMPT, JobState.RUNNING), name
    assert await snapshot(engine, made.id) == before

    async with engine.begin() as conn:  # the new attempt is unaffected
        assert await transitions.heartbeat(conn, made.id, new) == JobState.RUNNING
    async with engine.connect() as conn:
        rows = await conn.execute(select(attempts.c.id, attempts.c.outcome))
        outcomes = {row.id: row.outcome for row in rows}
    assert outcomes == {old: "lost", new: "running"}


async def test_an_expired_lease_fences_writes_before_the_reaper_runs(
    engine: AsyncEngine, transitions: Transitions, clock: Clock, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    clock.advance(LEASE + 1)
    before = await snapshot(engine, made.id)
    async with engine.begin() as conn:
        assert await transitions.heartbeat(conn, made.id, made.attempt_id) is None
        assert not await transitions.lock_for_publication(conn, made.id, made.attempt_id)
        outcome = await CALLS["publish"](transitions, conn, made.id, made.attempt_id)
    assert outcome == Rejected("publish", RejectReason.STALE_ATTEMPT, JobState.RUNNING)
    assert await snapshot(engine, made.id) == before


async def test_heartbeat_extends_the_lease_without_a_version_bump(
    engine: AsyncEngine, transitions: Transitions, clock: Clock, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    before = await jobs.row(made.id)
    clock.advance(LEASE - 1)
    async with engine.begin() as conn:
        assert await transitions.heartbeat(conn, made.id, made.attempt_id) == JobState.RUNNING
    after = await jobs.row(made.id)
    assert after.lease_expires_at > before.lease_expires_at
    assert after.version == before.version
    clock.advance(LEASE - 1)  # past the first lease, inside the extended one
    async with engine.begin() as conn:
        assert await transitions.lock_for_publication(conn, made.id, made.attempt_id)


# -- terminal states -----------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
async def test_terminal_states_are_never_rewritten(
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
    jobs: JobFactory,
    state: JobState,
) -> None:
    made = await jobs.make(state)
    attempt = made.attempt_id or uuid.uuid4()
    clock.advance(LEASE + 1)
    before = await snapshot(engine, made.id)
    for name, call in CALLS.items():
        if name in {"replay", "request_cancel"}:
            continue  # replay creates another job; request_cancel records a late request
        if name == "expire_result" and state == JobState.SUCCEEDED:
            continue  # the one allowed move (delivery only), tested below
        async with engine.begin() as conn:
            outcome = await call(transitions, conn, made.id, attempt)
        assert isinstance(outcome, Rejected), name
        assert outcome.current == state, name
    async with engine.begin() as conn:
        assert await transitions.claim(conn, worker_id="w", handlers=[made.handler], limit=5) == []
        assert await transitions.heartbeat(conn, made.id, attempt) is None
    assert await snapshot(engine, made.id) == before


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
async def test_cancel_on_a_terminal_job_is_recorded_as_too_late(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, state: JobState
) -> None:
    made = await jobs.make(state)
    row_before = await jobs.row(made.id)
    count_before = len(await history(engine, made.id))
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT, request_id="r-9")
    assert outcome == Rejected("request_cancel", RejectReason.ILLEGAL, state)
    assert await jobs.row(made.id) == row_before
    rows = await history(engine, made.id)
    assert len(rows) == count_before + 1
    late = rows[-1]
    assert (late.transition, late.from_state, late.to_state, late.reason) == (
        "request_cancel",
        state.value,
        state.value,
        "cancel_too_late",
    )
    assert (late.actor, late.event_id) == (str(CLIENT), "r-9")


async def test_cancel_by_another_owner_is_not_found_and_unrecorded(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.SUCCEEDED, owner="alice")
    before = await snapshot(engine, made.id)
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT, owner="mallory")
    assert outcome == Rejected("request_cancel", RejectReason.NOT_FOUND)
    assert await snapshot(engine, made.id) == before


async def test_expire_result_keeps_succeeded_and_happens_once(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.SUCCEEDED)
    before = await jobs.row(made.id)
    async with engine.begin() as conn:
        outcome = await transitions.expire_result(conn, made.id)
    assert isinstance(outcome, Applied)
    after = await jobs.row(made.id)
    assert (after.state, after.delivery_state) == ("succeeded", "expired")
    assert (after.finished_at, after.result_ref) == (before.finished_at, before.result_ref)
    assert after.version == before.version + 1
    async with engine.begin() as conn:
        again = await transitions.expire_result(conn, made.id)
    assert again == Rejected("expire_result", RejectReason.ILLEGAL, JobState.SUCCEEDED)
    assert (await moves(engine, made.id))[-1] == ("expire_result", "succeeded", "succeeded")


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.RUNNING, JobState.FAILED])
async def test_expire_result_reports_the_real_state(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, state: JobState
) -> None:
    made = await jobs.make(state)
    async with engine.begin() as conn:
        outcome = await transitions.expire_result(conn, made.id)
    assert outcome == Rejected("expire_result", RejectReason.ILLEGAL, state)


# -- history: one row per state change, in the same transaction ----------------------


async def test_history_row_is_written_in_the_same_transaction(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.QUEUED)
    async with engine.connect() as conn, conn.begin() as trans:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT)
        assert isinstance(outcome, Applied)
        inside = await conn.execute(
            select(func.count()).select_from(job_history).where(job_history.c.job_id == made.id)
        )
        assert inside.scalar_one() == 2
        await trans.rollback()
    assert (await jobs.row(made.id)).state == "queued"
    assert await moves(engine, made.id) == [("create", None, "queued")]


async def test_every_state_change_writes_exactly_one_history_row(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """A whole life: retry, review, approval, publication, expiry; each move is one row
    and bumps the version once."""
    t = transitions
    made = await jobs.make(JobState.QUEUED)
    version = (await jobs.row(made.id)).version

    async def step(call: Callable[[AsyncConnection], Awaitable[Any]]) -> Any:
        nonlocal version
        async with engine.begin() as conn:
            outcome = await call(conn)
        assert isinstance(outcome, Applied), outcome
        row = await jobs.row(made.id)
        assert row.version == version + 1
        version = row.version
        return outcome

    a1 = await claim_one(engine, t, made)
    version += 1
    await step(lambda c: t.retry_later(c, made.id, a1, error=FLAKY, delay_seconds=0, actor=WORKER))
    a2 = await claim_one(engine, t, made)
    version += 1
    await step(
        lambda c: t.wait(
            c,
            made.id,
            a2,
            reason=Reason.REVIEW,
            deadline_seconds=60,
            on_deadline="fail",
            actor=WORKER,
        )
    )
    await step(lambda c: t.approve(c, made.id, actor=REVIEWER))
    a3 = await claim_one(engine, t, made)
    version += 1
    await step(lambda c: t.stage_output(c, made.id, a3, DeliveryState.STAGED_PRIVATE, actor=WORKER))
    async with engine.begin() as conn:
        assert await t.lock_for_publication(conn, made.id, a3)
        await t.publish(conn, made.id, a3, result_ref={"f": 1}, ttl_seconds=60, actor=WORKER)
    version += 1
    await step(lambda c: t.expire_result(c, made.id))

    assert await moves(engine, made.id) == [
        ("create", None, "queued"),
        ("claim", "queued", "running"),
        ("retry_later", "running", "queued"),
        ("claim", "queued", "running"),
        ("wait", "running", "waiting"),
        ("approve", "waiting", "queued"),
        ("claim", "queued", "running"),
        ("publish", "running", "succeeded"),
        ("expire_result", "succeeded", "succeeded"),
    ]
    rows = await history(engine, made.id)
    assert [r.attempt_id for r in rows if r.transition in {"retry_later", "wait", "publish"}] == [
        a1,
        a2,
        a3,
    ]
    assert [r.reason for r in rows][:3] == ["new", "claimed", "retry"]


async def test_creation_history_has_no_placeholder_values(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    new = NewJob(
        owner="alice",
        kind="atlas.noop",
        kind_version=1,
        input={},
        max_attempts=1,
        max_elapsed_seconds=60,
        request_id="req-1",
        idempotency_key="key-1",
    )
    async with engine.begin() as conn:
        created = await transitions.create(conn, new, actor=CLIENT)
    [row] = await history(engine, created.job.id)
    assert row.event_id == "req-1"
    assert row.data == {"idempotency_key": "key-1"}


# -- progress ------------------------------------------------------------------------


async def test_expand_plan_keeps_done_counts_and_bumps_the_revision(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    t = transitions
    made = await jobs.make(JobState.RUNNING)
    a = made.attempt_id
    assert a is not None

    async def stages() -> dict[str, tuple[int, int, int]]:
        async with engine.connect() as conn:
            rows = await conn.execute(select(job_stages).where(job_stages.c.job_id == made.id))
            return {r.name: (r.done, r.total, r.plan_revision) for r in rows}

    async with engine.begin() as conn:
        await t.set_plan(
            conn, made.id, a, [("build", "tiles", 4), ("package", "a", 2)], actor=WORKER
        )
        for unit in ("cover-title", "cover-key", "cover-key"):  # a repeat counts once
            assert (await t.record_progress(conn, made.id, a, "build", unit, actor=WORKER)).ok
    assert await stages() == {"build": (2, 4, 1), "package": (0, 2, 1)}
    assert (await jobs.row(made.id)).plan_revision == 1

    async with engine.begin() as conn:
        assert (await t.expand_plan(conn, made.id, a, "build", 6, actor=WORKER)).ok
    assert await stages() == {"build": (2, 6, 2), "package": (0, 2, 1)}
    assert (await jobs.row(made.id)).plan_revision == 2
    assert (await moves(engine, made.id))[-1] == ("expand_plan", "running", "running")

    async with engine.begin() as conn:  # rediscovering the same units changes nothing
        assert (await t.expand_plan(conn, made.id, a, "build", 6, actor=WORKER)).ok
        assert (await t.set_plan(conn, made.id, a, [("build", "tiles", 4)], actor=WORKER)).ok
    assert await stages() == {"build": (2, 6, 2), "package": (0, 2, 1)}
    assert (await jobs.row(made.id)).plan_revision == 2


async def test_progress_survives_a_retry(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    t = transitions
    made = await jobs.make(JobState.RUNNING)
    a1 = made.attempt_id
    assert a1 is not None
    async with engine.begin() as conn:
        await t.set_plan(conn, made.id, a1, [("build", "tiles", 4)], actor=WORKER)
        await t.record_progress(conn, made.id, a1, "build", "t1", actor=WORKER)
        await t.retry_later(conn, made.id, a1, error=FLAKY, delay_seconds=0, actor=WORKER)
    a2 = await claim_one(engine, t, made)
    async with engine.begin() as conn:
        await t.set_plan(conn, made.id, a2, [("build", "tiles", 4)], actor=WORKER)
        await t.record_progress(conn, made.id, a2, "build", "t1", actor=WORKER)
        await t.record_progress(conn, made.id, a2, "build", "t2", actor=WORKER)
    async with engine.connect() as conn:
        done = (await conn.execute(select(job_stages.c.done))).scalar_one()
    assert done == 2


# -- attempt budget ------------------------------------------------------------------


async def test_release_does_not_charge_the_attempt(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING, max_attempts=1)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        outcome = await transitions.release(conn, made.id, made.attempt_id, actor=WORKER)
    assert isinstance(outcome, Applied)
    assert outcome.to_state == JobState.QUEUED
    row = await jobs.row(made.id)
    assert (row.state, row.attempt, row.charged_attempts) == ("queued", 1, 0)
    assert row.current_attempt_id is None
    assert row.lease_expires_at is None
    async with engine.connect() as conn:
        [ended] = await conn.execute(select(attempts).where(attempts.c.job_id == made.id))
    assert (ended.outcome, ended.charged) == ("released", 0)
    second = await claim_one(engine, transitions, made)
    row = await jobs.row(made.id)
    assert (row.attempt, row.charged_attempts, row.current_attempt_id) == (2, 1, second)


async def test_a_lost_lease_charges_the_attempt_and_exhausts_to_unresolved(
    engine: AsyncEngine, transitions: Transitions, clock: Clock, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING, max_attempts=2)
    first = await rescue_after_lease(engine, transitions, clock, made.id)
    assert isinstance(first, Applied)
    assert first.to_state == JobState.QUEUED
    assert first.job.reason == "retry"
    assert first.job.last_error["code"] == "lease_expired"
    await claim_one(engine, transitions, made)
    second = await rescue_after_lease(engine, transitions, clock, made.id)
    assert isinstance(second, Applied)
    assert (second.transition, second.to_state) == ("rescue_exhausted", JobState.UNRESOLVED)
    assert second.job.reason == Reason.LEASE_LOST.value


async def test_resume_grants_a_new_budget(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.UNRESOLVED, max_attempts=1)
    before = await jobs.row(made.id)
    assert (before.charged_attempts, before.max_attempts) == (1, 1)
    async with engine.begin() as conn:
        outcome = await transitions.resume(conn, made.id, actor=OPERATOR, note="fixed upstream")
    assert isinstance(outcome, Applied)
    row = await jobs.row(made.id)
    assert (row.state, row.reason, row.charged_attempts) == ("queued", "resumed", 0)
    assert row.budget_started_at >= before.budget_started_at
    await claim_one(engine, transitions, made)
    row = await jobs.row(made.id)
    assert (row.state, row.attempt, row.charged_attempts) == ("running", 2, 1)
    last = (await history(engine, made.id))[-2]
    assert (last.transition, last.actor, last.note) == ("resume", str(OPERATOR), "fixed upstream")


@pytest.mark.parametrize(("decision", "state"), [("cancel", "canceled"), ("fail", "failed")])
async def test_operator_decides_unresolved_work(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, decision: str, state: str
) -> None:
    made = await jobs.make(JobState.UNRESOLVED)
    async with engine.begin() as conn:
        outcome = await transitions.operator_decide(
            conn, made.id, decision=decision, actor=OPERATOR, note="n"
        )
    assert isinstance(outcome, Applied)
    row = await jobs.row(made.id)
    assert row.state == state
    assert row.finished_at is not None


# -- cancellation and publication ----------------------------------------------------


@pytest.mark.parametrize("state", [JobState.QUEUED, JobState.WAITING])
async def test_cancel_without_a_worker_is_immediate(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, state: JobState
) -> None:
    made = await jobs.make(state)
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT)
    assert isinstance(outcome, Applied)
    assert outcome.to_state == JobState.CANCELED
    row = await jobs.row(made.id)
    assert row.finished_at is not None
    assert row.wait_deadline_at is None
    assert row.cancel["requested_by"] == str(CLIENT)


async def test_cancel_of_running_work_waits_for_the_worker(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        await transitions.stage_output(
            conn, made.id, made.attempt_id, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
        )
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT)
    assert isinstance(outcome, Applied)
    assert outcome.to_state == JobState.CANCEL_REQUESTED
    async with engine.begin() as conn:
        assert (
            await transitions.heartbeat(conn, made.id, made.attempt_id) == JobState.CANCEL_REQUESTED
        )
        stopped = await transitions.stop_canceled(conn, made.id, made.attempt_id, actor=WORKER)
    assert isinstance(stopped, Applied)
    row = await jobs.row(made.id)
    assert (row.state, row.delivery_state, row.current_attempt_id) == ("canceled", "blocked", None)


async def test_publication_wins_over_an_earlier_cancel_request(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """j-44: the cancel arrives, publication commits first, the late cancel is visible."""
    made = await jobs.make(JobState.CANCEL_REQUESTED)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        assert await transitions.lock_for_publication(conn, made.id, made.attempt_id)
        outcome = await CALLS["publish"](transitions, conn, made.id, made.attempt_id)
    assert isinstance(outcome, Applied)
    assert outcome.from_state == JobState.CANCEL_REQUESTED
    row = await jobs.row(made.id)
    assert (row.state, row.delivery_state) == ("succeeded", "available")
    assert row.cancel is not None
    assert [m[2] for m in await moves(engine, made.id)] == [
        "queued",
        "running",
        "cancel_requested",
        "succeeded",
    ]


async def test_rescue_of_a_canceling_job_cancels_it(
    engine: AsyncEngine, transitions: Transitions, clock: Clock, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.CANCEL_REQUESTED)
    outcome = await rescue_after_lease(engine, transitions, clock, made.id)
    assert isinstance(outcome, Applied)
    assert outcome.to_state == JobState.CANCELED
    assert (await moves(engine, made.id))[-1] == ("rescue", "cancel_requested", "canceled")


async def test_failure_blocks_private_outputs(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        await transitions.stage_output(
            conn, made.id, made.attempt_id, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
        )
        await transitions.fail(conn, made.id, made.attempt_id, error=ERROR, actor=WORKER)
    row = await jobs.row(made.id)
    assert (row.state, row.delivery_state, row.error["code"]) == ("failed", "blocked", "boom")


# -- replay ---------------------------------------------------------------------------


async def test_replay_creates_a_new_job_and_leaves_the_old_one(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.FAILED, input={"preset": "reef"})
    before = await snapshot(engine, made.id)
    async with engine.begin() as conn:
        outcome = await transitions.replay(conn, made.id, actor=OPERATOR, note="after fix")
    assert isinstance(outcome, Applied)
    new = outcome.job
    assert new.id != made.id
    assert (new.replay_of, new.state, new.kind) == (made.id, "queued", made.kind)
    assert (await jobs.row(new.id)).input == {"preset": "reef"}  # the old job's (stored)
    assert await snapshot(engine, made.id) == before
    [created] = await history(engine, new.id)
    assert (created.transition, created.actor, created.note) == (
        "replay",
        str(OPERATOR),
        "after fix",
    )
    assert created.data == {"replay_of": str(made.id)}


# -- the database refuses what the lifecycle forbids ---------------------------------

RAW_VIOLATIONS = [
    (JobState.SUCCEEDED, "result_ref = NULL", "ck_jobs_published_only_when_succeeded"),
    (
        JobState.RUNNING,
        "delivery_state = 'available', result_ref = '{}'",
        "ck_jobs_published_only_when_succeeded",
    ),
    (
        JobState.CANCELED,
        "delivery_state = 'available', result_ref = '{}'",
        "ck_jobs_published_only_when_succeeded",
    ),
    (JobState.SUCCEEDED, "delivery_state = 'staged_private'", "ck_jobs_succeeded_has_published"),
    (JobState.SUCCEEDED, "finished_at = NULL", "ck_jobs_terminal_iff_finished"),
    (JobState.RUNNING, "finished_at = now()", "ck_jobs_terminal_iff_finished"),
    (JobState.RUNNING, "lease_expires_at = NULL", "ck_jobs_lease_iff_active"),
    (JobState.QUEUED, "current_attempt_id = gen_random_uuid()", "ck_jobs_lease_iff_active"),
    (JobState.RUNNING, "current_attempt_id = NULL", "ck_jobs_lease_iff_active"),
    (JobState.RUNNING, "delivery_state = 'blocked'", "ck_jobs_blocked_only_when_abandoned"),
    (JobState.WAITING, "wait_deadline_at = NULL", "ck_jobs_waiting_has_deadline"),
    (JobState.FAILED, "error = NULL", "ck_jobs_failed_has_error"),
    (JobState.QUEUED, "state = 'succeeded', reason = 'published'", "ck_jobs_"),
    (JobState.RUNNING, "reason = 'new'", "ck_jobs_reason_matches_state"),
    (JobState.QUEUED, "charged_attempts = -1", "ck_jobs_counters_nonnegative"),
    (JobState.QUEUED, "attempt = -1", "ck_jobs_counters_nonnegative"),
    (JobState.QUEUED, "max_attempts = 0", "ck_jobs_counters_nonnegative"),
    (JobState.QUEUED, "plan_revision = -1", "ck_jobs_counters_nonnegative"),
    (JobState.QUEUED, "state = 'bogus'", "ck_jobs_state_known"),
    (JobState.QUEUED, "delivery_state = 'bogus'", "ck_jobs_delivery_state_known"),
    (JobState.QUEUED, "lease_expires_at = now()", "ck_jobs_lease_iff_active"),
    (JobState.FAILED, "finished_at = NULL", "ck_jobs_terminal_iff_finished"),
    (JobState.WAITING, "wait_on_deadline = 'bogus'", "ck_jobs_waiting_has_deadline"),
]


async def test_check_constraints_refuse_invalid_rows(engine: AsyncEngine, jobs: JobFactory) -> None:
    """Raw SQL that bypasses the service still cannot store a state the lifecycle forbids."""
    for state, assignment, constraint in RAW_VIOLATIONS:
        made = await jobs.make(state)
        with pytest.raises(IntegrityError, match=constraint):
            async with engine.begin() as conn:
                await conn.execute(
                    text(f"UPDATE jobs SET {assignment} WHERE id = :id"), {"id": made.id}
                )
        assert (await jobs.row(made.id)).state == state.value


async def test_progress_can_not_exceed_its_total(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        await transitions.set_plan(conn, made.id, made.attempt_id, [("b", "u", 1)], actor=WORKER)
    with pytest.raises(IntegrityError, match="ck_job_stages_done_within_total"):
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE job_stages SET done = 2"))


async def test_a_partial_package_is_never_published(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """Publication needs a complete package (staged_private) or no files at all; from
    partial_private it is refused as illegal and nothing changes."""
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        staged = await transitions.stage_output(
            conn, made.id, made.attempt_id, DeliveryState.PARTIAL_PRIVATE, actor=WORKER
        )
    assert staged.ok
    before = await jobs.row(made.id)
    async with engine.begin() as conn:
        assert await transitions.lock_for_publication(conn, made.id, made.attempt_id)
        refused = await transitions.publish(
            conn, made.id, made.attempt_id, result_ref={"files": []}, ttl_seconds=60, actor=WORKER
        )
    assert refused == Rejected("publish", RejectReason.ILLEGAL, JobState.RUNNING)
    assert await jobs.row(made.id) == before

    async with engine.begin() as conn:
        complete = await transitions.stage_output(
            conn, made.id, made.attempt_id, DeliveryState.STAGED_PRIVATE, actor=WORKER
        )
        assert complete.ok
        assert await transitions.lock_for_publication(conn, made.id, made.attempt_id)
        published = await transitions.publish(
            conn, made.id, made.attempt_id, result_ref={"files": []}, ttl_seconds=60, actor=WORKER
        )
    assert published.ok
    assert (await jobs.row(made.id)).delivery_state == DeliveryState.AVAILABLE.value


async def test_an_operators_cancel_of_unresolved_work_is_the_operators_decision(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.UNRESOLVED)
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=OPERATOR, request_id="r-1")
    assert isinstance(outcome, Applied)
    assert (outcome.transition, outcome.from_state, outcome.to_state) == (
        "operator_cancel",
        JobState.UNRESOLVED,
        JobState.CANCELED,
    )
    last = (await history(engine, made.id))[-1]
    assert (last.transition, last.from_state, last.to_state, last.actor, last.note) == (
        "operator_cancel",
        "unresolved",
        "canceled",
        str(OPERATOR),
        "canceled by an operator",
    )


async def test_a_clients_cancel_of_unresolved_work_is_refused_and_changes_nothing(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.UNRESOLVED)
    before = await snapshot(engine, made.id)
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT)
    assert outcome == Rejected("request_cancel", RejectReason.ILLEGAL, JobState.UNRESOLVED)
    assert not outcome.took_effect
    assert await snapshot(engine, made.id) == before


@pytest.mark.parametrize("state", [JobState.CANCEL_REQUESTED, JobState.CANCELED])
async def test_a_repeated_cancel_took_effect_already(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory, state: JobState
) -> None:
    made = await jobs.make(state)
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(conn, made.id, actor=CLIENT)
    assert isinstance(outcome, Rejected)
    assert (outcome.current, outcome.took_effect) == (state, True)
