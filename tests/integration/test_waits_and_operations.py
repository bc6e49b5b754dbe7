"""The moves of waits and external operations against the real database, with the test
clock: decisions and
signals that lose to a passed deadline, signal deduplication, operation records."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.schema import job_history, job_signals
from atlas_jobs._app.lifecycle import DECISION_TOO_LATE, JobState, Reason, TransitionName
from atlas_jobs._app.transitions import (
    Actor,
    Applied,
    OperationEntry,
    Rejected,
    SignalOutcome,
    Transitions,
)
from tests.factory import JobFactory

REVIEWER = Actor("reviewer", "alice")
CLIENT = Actor("client", "alice")
WORKER = Actor("worker", "w-test")


async def _waiting(
    jobs: JobFactory, t: Transitions, engine: AsyncEngine, reason: Reason, rule: str = "fail"
) -> uuid.UUID:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    async with engine.begin() as conn:
        outcome = await t.wait(
            conn,
            made.id,
            made.attempt_id,
            reason=reason,
            deadline_seconds=60,
            on_deadline=rule,
            actor=WORKER,
        )
    assert isinstance(outcome, Applied)
    return made.id


async def _history(engine: AsyncEngine, job_id: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        return list(await reads.history(conn, job_id))


async def test_an_approval_after_the_deadline_loses_before_the_sweeper_runs(
    jobs: JobFactory, transitions: Transitions, engine: AsyncEngine, clock: Clock
) -> None:
    job_id = await _waiting(jobs, transitions, engine, Reason.REVIEW, rule="escalate")
    clock.advance(61)  # the deadline passed; no sweeper has run
    async with engine.begin() as conn:
        outcome = await transitions.decide_review(
            conn, job_id, approve=True, actor=REVIEWER, note="late"
        )
    assert isinstance(outcome, Rejected)
    assert outcome.current == JobState.UNRESOLVED  # the deadline's rule won
    row = await jobs.row(job_id)
    assert (row.state, row.reason) == ("unresolved", "deadline_escalated")
    history = await _history(engine, job_id)
    moves = [(h.transition, h.reason) for h in history]
    assert moves[-2:] == [
        ("deadline_escalate", "deadline_escalated"),
        ("approve", DECISION_TOO_LATE),
    ]
    async with engine.connect() as conn:
        assert not await reads.has_transition(conn, job_id, TransitionName.APPROVE)


async def test_a_decision_before_the_deadline_wins(
    jobs: JobFactory, transitions: Transitions, engine: AsyncEngine, clock: Clock
) -> None:
    job_id = await _waiting(jobs, transitions, engine, Reason.REVIEW)
    clock.advance(59)
    async with engine.begin() as conn:
        outcome = await transitions.decide_review(conn, job_id, approve=True, actor=REVIEWER)
    assert isinstance(outcome, Applied)
    assert (outcome.job.state, outcome.job.reason) == ("queued", "review_approved")
    async with engine.connect() as conn:
        assert await reads.has_transition(conn, job_id, TransitionName.APPROVE)


async def test_a_signal_is_recorded_once_and_repeats_answer_the_first_outcome(
    jobs: JobFactory, transitions: Transitions, engine: AsyncEngine
) -> None:
    job_id = await _waiting(jobs, transitions, engine, Reason.EXTERNAL)
    outcomes = []
    for _ in range(3):
        async with engine.begin() as conn:
            outcomes.append(
                await transitions.signal(
                    conn, job_id, event_id="evt-1", actor=CLIENT, data={"n": 1}
                )
            )
    first, *repeats = outcomes
    assert isinstance(first, SignalOutcome)
    assert not first.replayed
    assert first.record.outcome == {"state": "queued", "reason": "event_received"}
    for repeat in repeats:
        assert isinstance(repeat, SignalOutcome)
        assert repeat.replayed
        assert repeat.record == first.record
    async with engine.connect() as conn:
        signals = (await conn.execute(select(job_signals))).all()
        received = (
            await conn.execute(
                select(job_history).where(
                    job_history.c.job_id == job_id, job_history.c.transition == "receive_event"
                )
            )
        ).all()
    assert len(signals) == 1
    assert len(received) == 1
    # another event id for a job no longer waiting: refused, nothing recorded
    async with engine.begin() as conn:
        refused = await transitions.signal(conn, job_id, event_id="evt-2", actor=CLIENT)
    assert isinstance(refused, Rejected)
    assert refused.current == JobState.QUEUED


async def test_a_review_wait_refuses_signals_and_an_external_wait_refuses_reviews(
    jobs: JobFactory, transitions: Transitions, engine: AsyncEngine
) -> None:
    review = await _waiting(jobs, transitions, engine, Reason.REVIEW)
    external = await _waiting(jobs, transitions, engine, Reason.EXTERNAL)
    async with engine.begin() as conn:
        signal = await transitions.signal(conn, review, event_id="e", actor=CLIENT)
        decision = await transitions.decide_review(conn, external, approve=True, actor=REVIEWER)
    assert isinstance(signal, Rejected)
    assert isinstance(decision, Rejected)
    assert (await jobs.row(review)).state == (await jobs.row(external)).state == "waiting"


async def test_operation_records_are_fenced_by_the_attempt(
    jobs: JobFactory, transitions: Transitions, engine: AsyncEngine
) -> None:
    made = await jobs.make(JobState.RUNNING)
    assert made.attempt_id is not None
    entry = OperationEntry(
        operation_id=uuid.uuid4(),
        step="publish",
        destination="press",
        outcome="attempted",
        state="intended",
        sends=1,
    )
    async with engine.begin() as conn:
        recorded = await transitions.record_operation(
            conn, made.id, made.attempt_id, entry, actor=WORKER
        )
        stale = await transitions.record_operation(conn, made.id, uuid.uuid4(), entry, actor=WORKER)
    assert isinstance(recorded, Applied)
    assert isinstance(stale, Rejected)
    async with engine.connect() as conn:
        row = await reads.operation(conn, entry.operation_id)
    assert row is not None
    assert (row.state, row.sends, row.job_id) == ("intended", 1, made.id)
    history = await _history(engine, made.id)
    [written] = [h for h in history if h.transition == "record_operation"]
    assert written.data == {
        "operation_id": str(entry.operation_id),
        "step": "publish",
        "destination": "press",
        "outcome": "attempted",
    }
