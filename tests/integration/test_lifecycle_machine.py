"""A Hypothesis state machine drives random sequences of named transitions against the
real database, and checks the lifecycle's invariants after every step.

The machine keeps a model of each job (state, current and past attempt ids, lease,
budget, delivery, plan) computed from ``atlas_jobs._app.lifecycle`` alone, and predicts the typed
outcome of every call: applied (and to which state), illegal, or a stale attempt. The
invariants are then read back from PostgreSQL:

* the database agrees with the model (state, delivery, plan revision, done counts);
* a terminal state never changes;
* history rows with ``from <> to`` (creation included) equal the state changes made;
* a canceled job never has delivery ``available``;
* a rejected move -- a stale attempt id above all -- changes nothing at all;
* plan revisions, done counts and versions never go backwards;
* the CHECK constraints hold (a violating write would raise and fail the step).

Cancellation and publication also meet "concurrently": one connection holds the
publication lock while another tries to cancel with a short ``lock_timeout`` (and the
other way round), then the holder commits or rolls back.

Hypothesis' stateful runner is synchronous, so the machine drives the async service
through a private event loop (:class:`asyncio.Runner`) with an engine created on that
loop. One database serves the whole run; each example uses its own job kind (claims
see only its jobs) and its own clock.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.lifecycle import (
    ACTIVE_STATES,
    DELIVERY_MOVES,
    TERMINAL_STATES,
    TRANSITIONS,
    DeliveryState,
    JobState,
    Reason,
    budget_verdict,
)
from atlas_jobs._app.transitions import (
    Actor,
    Applied,
    NewJob,
    Rejected,
    RejectReason,
    Transitions,
    error_doc,
)
from tests.support import Server

T = TypeVar("T")

LEASE = 600
STEP = LEASE + 1
WAIT_DEADLINE = 3600
"""Each wait's deadline (s), as MAX_ELAPSED: not a multiple of STEP, so the clock is never
within a few real seconds of it."""
MAX_ELAPSED = 3600
"""Each job's elapsed-time budget (s): a rescue after it is spent gives up, whatever the
attempts left. 601 s steps never land near it, so database time's few real seconds on
top of the clock offset cannot tip a prediction."""
"""The clock only moves in steps longer than a lease, so "is this lease live" has a
sharp answer however long the run takes in real time."""

CLIENT = Actor("client", "hyp")
WORKER = Actor("worker", "hyp")
OPERATOR = Actor("operator", "hyp")
ERROR = error_doc("boom", "permanent", retryable=False)
FLAKY = error_doc("flaky", "again", retryable=True)
STAGE = "build"
LOCK_NOT_AVAILABLE = "55P03"

WHICH = st.sampled_from(["current", "current", "current", "stale", "random"])
"""Which attempt id a worker call uses: the live one, one from an earlier attempt of the
same job, or one that never existed."""

Pick = tuple[bool, int]
PICK = st.tuples(st.sampled_from([True, True, True, False]), st.integers(0, 255))
"""Which job a rule acts on: three times in four one the move applies to (when there is
one), else any job of the example -- the illegal calls matter too."""


@dataclass
class JobModel:
    id: uuid.UUID
    max_attempts: int
    state: JobState = JobState.QUEUED
    current: uuid.UUID | None = None
    past: list[uuid.UUID] = field(default_factory=list)
    lease_step: int | None = None
    charged: int = 0
    changes: int = 1  # creation is a state change (from nothing to queued)
    delivery: DeliveryState = DeliveryState.NONE
    plan_revision: int = 0
    total: int | None = None
    units: set[str] = field(default_factory=set)
    terminal: JobState | None = None
    version: int = 1
    budget_from: float = 0.0  # clock offset (s) when the elapsed-time budget started
    wait_reason: Reason | None = None
    wait_deadline: float | None = None  # clock offset (s) when the wait's deadline passes
    late_cancel_last: bool = False  # the job's last history row is this actor's late cancel


SNAPSHOT = text("""
SELECT row_to_json(j)::text AS row,
       (SELECT count(*) FROM job_history h WHERE h.job_id = j.id) AS history,
       (SELECT coalesce(json_agg(s ORDER BY s.name)::text, '') FROM job_stages s
         WHERE s.job_id = j.id) AS stages,
       (SELECT count(*) FROM job_checkpoints c WHERE c.job_id = j.id) AS checkpoints,
       (SELECT coalesce(json_agg(a ORDER BY a.number)::text, '') FROM attempts a
         WHERE a.job_id = j.id) AS attempts
  FROM jobs j
 WHERE j.id = :id
""")

OBSERVE = text("""
SELECT j.id, j.state, j.delivery_state, j.plan_revision, j.version, j.result_ref,
       j.current_attempt_id, j.charged_attempts,
       (SELECT count(*) FROM job_history h
         WHERE h.job_id = j.id AND h.from_state IS DISTINCT FROM h.to_state) AS changes,
       (SELECT done FROM job_stages s WHERE s.job_id = j.id AND s.name = :stage) AS done,
       (SELECT total FROM job_stages s WHERE s.job_id = j.id AND s.name = :stage) AS total
  FROM jobs j
 WHERE j.kind = :kind
""")


class LifecycleMachine(RuleBasedStateMachine):
    runner: ClassVar[asyncio.Runner]
    engine: ClassVar[AsyncEngine]

    def __init__(self) -> None:
        super().__init__()
        self.kind = f"hyp.{uuid.uuid4().hex[:10]}"
        self.clock = Clock()
        self.t = Transitions(self.clock, lease_seconds=LEASE)
        self.step = 0
        self.models: dict[uuid.UUID, JobModel] = {}
        self.seen_done: dict[uuid.UUID, int] = {}

    # -- plumbing ---------------------------------------------------------------------

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def tx(self, call: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        async def go() -> T:
            async with self.engine.begin() as conn:
                return await call(conn)

        return self.run(go())

    def snapshot(self, job_id: uuid.UUID) -> tuple[Any, ...]:
        async def go() -> tuple[Any, ...]:
            async with self.engine.connect() as conn:
                return tuple((await conn.execute(SNAPSHOT, {"id": job_id})).one())

        return self.run(go())

    @staticmethod
    def sources(relevant_to: str) -> frozenset[JobState]:
        if relevant_to == "TERMINAL":
            return TERMINAL_STATES
        if relevant_to == "ACTIVE":
            return ACTIVE_STATES
        return TRANSITIONS[relevant_to].sources

    def some(self, relevant_to: str) -> bool:
        """A precondition: some job is in a state the move applies to."""
        sources = self.sources(relevant_to)
        return any(job.state in sources for job in self.models.values())

    def choose(self, pick: Pick, relevant_to: str) -> uuid.UUID:
        prefer, index = pick
        sources = self.sources(relevant_to)
        everyone = list(self.models)
        pool = [i for i in everyone if self.models[i].state in sources] if prefer else []
        pool = pool or everyone
        return pool[index % len(pool)]

    def attempt(self, job: JobModel, which: str) -> uuid.UUID:
        if which == "current" and job.current is not None:
            return job.current
        stale = [a for a in job.past if a != job.current]
        if which == "stale" and stale:
            return stale[-1]
        return uuid.uuid4()

    def holds(self, job: JobModel, attempt: uuid.UUID | None) -> bool:
        """The model's fencing rule: the current attempt with a live lease."""
        return (
            job.state in ACTIVE_STATES
            and attempt is not None
            and attempt == job.current
            and job.lease_step == self.step
        )

    def expect(
        self, job: JobModel, name: str, outcome: Any, attempt: uuid.UUID | None = None
    ) -> JobState | None:
        """Assert the typed outcome the lifecycle predicts; the target when applied."""
        spec = TRANSITIONS[name]
        target = spec.target(job.state)
        if target is None:
            assert outcome == Rejected(name, RejectReason.ILLEGAL, job.state)
            event(f"{name}: illegal")
            return None
        if spec.fenced and not self.holds(job, attempt):
            assert outcome == Rejected(name, RejectReason.STALE_ATTEMPT, job.state)
            event(f"{name}: stale attempt")
            return None
        event(f"{name}: {job.state} -> {target}")
        assert isinstance(outcome, Applied), outcome
        assert (outcome.transition, outcome.from_state, outcome.to_state) == (
            name,
            job.state,
            target,
        )
        return target

    def move(self, job: JobModel, target: JobState) -> None:
        """Apply an applied move to the model, as the lifecycle says it happens."""
        job.late_cancel_last = False
        if target != job.state:
            job.changes += 1
        if job.state in ACTIVE_STATES and target not in ACTIVE_STATES:
            job.current, job.lease_step = None, None
        abandoned = target in {JobState.FAILED, JobState.CANCELED}
        private = job.delivery in {DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE}
        if abandoned and private and job.state not in TERMINAL_STATES:
            job.delivery = DeliveryState.BLOCKED
        job.state = target
        if target in TERMINAL_STATES and job.terminal is None:
            job.terminal = target

    def worker_call(
        self,
        job_id: uuid.UUID,
        which: str,
        name: str,
        call: Callable[[AsyncConnection, uuid.UUID], Awaitable[Any]],
    ) -> tuple[JobModel, JobState | None]:
        """A fenced call; a rejected one must leave every trace of the job untouched."""
        job = self.models[job_id]
        attempt = self.attempt(job, which)
        before = self.snapshot(job_id)
        outcome = self.tx(lambda conn: call(conn, attempt))
        target = self.expect(job, name, outcome, attempt)
        if target is None:
            assert self.snapshot(job_id) == before, f"rejected {name} changed the job"
        return job, target

    # -- creation ---------------------------------------------------------------------

    @initialize()
    def first_jobs(self) -> None:
        self.create_job(2)
        self.create_job(1)

    @rule(max_attempts=st.integers(1, 3))
    def create(self, max_attempts: int) -> None:
        self.create_job(max_attempts)

    def create_job(self, max_attempts: int) -> None:
        new = NewJob(
            owner="hyp",
            kind=self.kind,
            kind_version=1,
            input={"n": len(self.models)},
            max_attempts=max_attempts,
            max_elapsed_seconds=MAX_ELAPSED,
        )
        created = self.tx(lambda conn: self.t.create(conn, new, actor=CLIENT))
        self.models[created.job.id] = JobModel(
            created.job.id, max_attempts, budget_from=self.offset()
        )

    @precondition(lambda self: self.some("TERMINAL"))
    @rule(pick=PICK)
    def replay(self, pick: Pick) -> None:
        job_id = self.choose(pick, "TERMINAL")
        job = self.models[job_id]
        before = self.snapshot(job_id)
        outcome = self.tx(lambda conn: self.t.replay(conn, job_id, actor=OPERATOR))
        assert self.snapshot(job_id) == before, "replay never rewrites the old job"
        if job.state not in TERMINAL_STATES:
            assert outcome == Rejected("replay", RejectReason.ILLEGAL, job.state)
            return
        assert isinstance(outcome, Applied)
        assert outcome.job.replay_of == job_id
        assert outcome.job.state == JobState.QUEUED
        self.models[outcome.job.id] = JobModel(
            outcome.job.id, outcome.job.max_attempts, budget_from=self.offset()
        )

    # -- workers ----------------------------------------------------------------------

    @precondition(lambda self: self.some("claim"))
    @rule(limit=st.integers(1, 3))
    def claim_more(self, limit: int) -> None:
        """Claiming is what makes most other moves possible: give it two rules."""
        self.claim(limit)

    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        queued = {m.id for m in self.models.values() if m.state == JobState.QUEUED}
        rows = self.tx(
            lambda conn: self.t.claim(
                conn, worker_id="hyp", handlers=[f"{self.kind}@1"], limit=limit
            )
        )
        assert len(rows) == min(limit, len(queued))
        event(f"claim: {len(rows)} of {len(queued)} queued")
        for row in rows:
            job = self.models[row.id]
            assert row.id in queued
            assert row.state == JobState.RUNNING
            assert row.current_attempt_id not in job.past, "every claim is a new attempt"
            self.move(job, JobState.RUNNING)
            job.current = row.current_attempt_id
            job.past.append(row.current_attempt_id)
            job.lease_step = self.step
            job.charged += 1

    @precondition(lambda self: self.some("ACTIVE"))
    @rule(pick=PICK, which=WHICH)
    def heartbeat(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "ACTIVE")
        job = self.models[job_id]
        attempt = self.attempt(job, which)
        before = self.snapshot(job_id)
        state = self.tx(lambda conn: self.t.heartbeat(conn, job_id, attempt))
        if self.holds(job, attempt):
            assert state == job.state
            event("heartbeat: extended")
        else:
            assert state is None
            assert self.snapshot(job_id) == before

    @precondition(lambda self: self.some("declare_plan"))
    @rule(pick=PICK, which=WHICH)
    def set_plan(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "declare_plan")
        job, target = self.worker_call(
            job_id,
            which,
            "declare_plan",
            lambda conn, a: self.t.set_plan(conn, job_id, a, [(STAGE, "tiles", 4)], actor=WORKER),
        )
        if target is not None:
            job.plan_revision = max(job.plan_revision, 1)
            if job.total is None:
                job.total = 4

    @precondition(lambda self: self.some("record_progress"))
    @rule(pick=PICK, which=WHICH, unit=st.integers(0, 20))
    def record_progress(self, pick: Pick, which: str, unit: int) -> None:
        job_id = self.choose(pick, "record_progress")
        job = self.models[job_id]
        name = f"u{unit % job.total}" if job.total else f"u{unit}"
        job, target = self.worker_call(
            job_id,
            which,
            "record_progress",
            lambda conn, a: self.t.record_progress(conn, job_id, a, STAGE, name, actor=WORKER),
        )
        if target is not None and job.total is not None:
            job.units.add(name)

    @precondition(lambda self: self.some("expand_plan"))
    @rule(pick=PICK, which=WHICH, extra=st.integers(1, 3))
    def expand_plan(self, pick: Pick, which: str, extra: int) -> None:
        job_id = self.choose(pick, "expand_plan")
        new_total = (self.models[job_id].total or 0) + extra
        job, target = self.worker_call(
            job_id,
            which,
            "expand_plan",
            lambda conn, a: self.t.expand_plan(conn, job_id, a, STAGE, new_total, actor=WORKER),
        )
        if target is not None:
            job.plan_revision += 1
            if job.total is not None:
                job.total = new_total

    @precondition(lambda self: self.some("stage_output"))
    @rule(
        pick=PICK,
        which=WHICH,
        delivery=st.sampled_from([DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE]),
    )
    def stage_output(self, pick: Pick, which: str, delivery: DeliveryState) -> None:
        """Private outputs move forward or stay; a move the delivery table does not
        allow (staged back to partial) is refused, and changes nothing."""
        job_id = self.choose(pick, "stage_output")
        job = self.models[job_id]
        attempt = self.attempt(job, which)
        allowed = (job.delivery, delivery) in DELIVERY_MOVES or job.delivery == delivery
        holding = TRANSITIONS["stage_output"].target(job.state) and self.holds(job, attempt)
        if holding and not allowed:
            before = self.snapshot(job_id)
            outcome = self.tx(
                lambda conn: self.t.stage_output(conn, job_id, attempt, delivery, actor=WORKER)
            )
            assert outcome == Rejected("stage_output", RejectReason.ILLEGAL, job.state)
            assert self.snapshot(job_id) == before, "a refused delivery move wrote"
            event("stage_output: delivery move refused")
            return
        job, target = self.worker_call(
            job_id,
            which,
            "stage_output",
            lambda conn, a: self.t.stage_output(conn, job_id, a, delivery, actor=WORKER),
        )
        if target is not None:
            job.delivery = delivery

    @precondition(lambda self: self.some("retry_later"))
    @rule(pick=PICK, which=WHICH)
    def retry_later(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "retry_later")
        job, target = self.worker_call(
            job_id,
            which,
            "retry_later",
            lambda conn, a: self.t.retry_later(
                conn, job_id, a, error=FLAKY, delay_seconds=0, actor=WORKER
            ),
        )
        if target is not None:
            self.move(job, target)

    @precondition(lambda self: self.some("release"))
    @rule(pick=PICK, which=WHICH)
    def release(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "release")
        job, target = self.worker_call(
            job_id, which, "release", lambda conn, a: self.t.release(conn, job_id, a, actor=WORKER)
        )
        if target is not None:
            self.move(job, target)
            job.charged = max(job.charged - 1, 0)

    @precondition(lambda self: self.some("give_up"))
    @rule(pick=PICK, which=WHICH)
    def give_up(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "give_up")
        job, target = self.worker_call(
            job_id,
            which,
            "give_up",
            lambda conn, a: self.t.give_up(
                conn, job_id, a, error=FLAKY, reason=Reason.RETRIES_EXHAUSTED, actor=WORKER
            ),
        )
        if target is not None:
            self.move(job, target)

    @precondition(lambda self: self.some("wait"))
    @rule(
        pick=PICK,
        which=WHICH,
        reason=st.sampled_from([Reason.REVIEW, Reason.EXTERNAL]),
        on_deadline=st.sampled_from(["fail", "escalate"]),
    )
    def wait(self, pick: Pick, which: str, reason: Reason, on_deadline: str) -> None:
        job_id = self.choose(pick, "wait")
        job, target = self.worker_call(
            job_id,
            which,
            "wait",
            lambda conn, a: self.t.wait(
                conn,
                job_id,
                a,
                reason=reason,
                deadline_seconds=WAIT_DEADLINE,
                on_deadline=on_deadline,
                actor=WORKER,
            ),
        )
        if target is not None:
            self.move(job, target)
            job.wait_reason = reason
            job.charged = max(job.charged - 1, 0)  # a business wait is not charged
            job.wait_deadline = self.offset() + WAIT_DEADLINE

    @precondition(lambda self: self.some("stop_canceled"))
    @rule(pick=PICK, which=WHICH)
    def stop_canceled(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "stop_canceled")
        job, target = self.worker_call(
            job_id,
            which,
            "stop_canceled",
            lambda conn, a: self.t.stop_canceled(conn, job_id, a, actor=WORKER),
        )
        if target is not None:
            self.move(job, target)

    @precondition(lambda self: self.some("fail"))
    @rule(pick=PICK, which=WHICH)
    def fail(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "fail")
        job, target = self.worker_call(
            job_id,
            which,
            "fail",
            lambda conn, a: self.t.fail(conn, job_id, a, error=ERROR, actor=WORKER),
        )
        if target is not None:
            self.move(job, target)

    async def _publish(self, conn: AsyncConnection, job_id: uuid.UUID, a: uuid.UUID) -> Any:
        locked = await self.t.lock_for_publication(conn, job_id, a)
        assert locked == self.holds(self.models[job_id], a)
        return await self.t.publish(
            conn, job_id, a, result_ref={"bundle": str(job_id)}, ttl_seconds=3600, actor=WORKER
        )

    @precondition(lambda self: self.some("publish"))
    @rule(pick=PICK, which=WHICH)
    def publish(self, pick: Pick, which: str) -> None:
        job_id = self.choose(pick, "publish")
        job = self.models[job_id]
        attempt = self.attempt(job, which)
        partial = job.delivery == DeliveryState.PARTIAL_PRIVATE
        if partial and TRANSITIONS["publish"].target(job.state) and self.holds(job, attempt):
            # A partial package is never published: refused, and nothing changes.
            before = self.snapshot(job_id)
            outcome = self.tx(lambda conn: self._publish(conn, job_id, attempt))
            assert outcome == Rejected("publish", RejectReason.ILLEGAL, job.state)
            assert self.snapshot(job_id) == before
            event("publish: partial package refused")
            return
        job, target = self.worker_call(
            job_id, which, "publish", lambda conn, a: self._publish(conn, job_id, a)
        )
        if target is not None:
            self.move(job, target)
            job.delivery = DeliveryState.AVAILABLE

    # -- clients, operators, maintenance ----------------------------------------------

    def check_cancel(self, job: JobModel, outcome: Any, before: tuple[Any, ...]) -> None:
        target = self.expect(job, "request_cancel", outcome)
        if target is not None:
            self.move(job, target)
            return
        after = self.snapshot(job.id)
        if job.state in TERMINAL_STATES:  # recorded as too late, nothing else changes
            assert after[0] == before[0]
            assert after[2:] == before[2:]
            # A repeat by the same actor while its row is the last only counts up.
            assert after[1] == before[1] + (0 if job.late_cancel_last else 1)
            job.late_cancel_last = True
        else:
            assert after == before

    @precondition(lambda self: self.some("request_cancel"))
    @rule(pick=PICK)
    def request_cancel(self, pick: Pick) -> None:
        self.request_cancel_on(self.choose(pick, "request_cancel"))

    def request_cancel_on(self, job_id: uuid.UUID) -> None:
        job = self.models[job_id]
        before = self.snapshot(job_id)
        outcome = self.tx(lambda conn: self.t.request_cancel(conn, job_id, actor=CLIENT))
        self.check_cancel(job, outcome, before)

    @precondition(lambda self: self.some("TERMINAL"))
    @rule(pick=PICK)
    def cancel_finished_job(self, pick: Pick) -> None:
        """A cancel that arrives after the end: refused, recorded, nothing changes."""
        self.request_cancel_on(self.choose(pick, "TERMINAL"))

    @precondition(lambda self: self.some("expire_result"))
    @rule(pick=PICK)
    def expire_result(self, pick: Pick) -> None:
        job_id = self.choose(pick, "expire_result")
        job = self.models[job_id]
        before = self.snapshot(job_id)
        outcome = self.tx(lambda conn: self.t.expire_result(conn, job_id))
        if job.state == JobState.SUCCEEDED and job.delivery == DeliveryState.AVAILABLE:
            assert self.expect(job, "expire_result", outcome) == JobState.SUCCEEDED
            job.delivery = DeliveryState.EXPIRED
            job.late_cancel_last = False
        else:
            assert outcome == Rejected("expire_result", RejectReason.ILLEGAL, job.state)
            assert self.snapshot(job_id) == before

    def offset(self) -> float:
        return self.clock.offset.total_seconds()

    @rule()
    def advance_clock(self) -> None:
        """Every live lease of this example expires."""
        self.clock.advance(STEP)
        self.step += 1

    @precondition(lambda self: self.some("rescue"))
    @rule(pick=PICK)
    def rescue(self, pick: Pick) -> None:
        job_id = self.choose(pick, "rescue")
        job = self.models[job_id]
        before = self.snapshot(job_id)
        outcome = self.tx(lambda conn: self.t.rescue(conn, job_id, backoff_seconds=0))
        if job.state not in ACTIVE_STATES or job.lease_step == self.step:
            assert outcome == Rejected("rescue", RejectReason.ILLEGAL, job.state)
            assert self.snapshot(job_id) == before
            return
        if job.state == JobState.CANCEL_REQUESTED:
            expected = ("rescue", JobState.CANCELED)
        elif budget_verdict(
            charged_attempts=job.charged,
            max_attempts=job.max_attempts,
            elapsed_seconds=self.offset() - job.budget_from,
            max_elapsed_seconds=MAX_ELAPSED,
        ):
            expected = ("rescue_exhausted", JobState.UNRESOLVED)
        else:
            expected = ("rescue", JobState.QUEUED)
        assert isinstance(outcome, Applied), outcome
        assert (outcome.transition, outcome.to_state) == expected
        event(f"{expected[0]}: {job.state} -> {expected[1]}")
        self.move(job, expected[1])

    @precondition(lambda self: self.some("resume"))
    @rule(pick=PICK)
    def resume(self, pick: Pick) -> None:
        job_id = self.choose(pick, "resume")
        job = self.models[job_id]
        outcome = self.tx(lambda conn: self.t.resume(conn, job_id, actor=OPERATOR))
        target = self.expect(job, "resume", outcome)
        if target is not None:
            self.move(job, target)
            job.charged = 0
            job.budget_from = self.offset()

    @precondition(lambda self: self.some("operator_cancel"))
    @rule(pick=PICK, decision=st.sampled_from(["cancel", "fail"]))
    def operator_decide(self, pick: Pick, decision: str) -> None:
        job_id = self.choose(pick, "operator_cancel")
        job = self.models[job_id]
        outcome = self.tx(
            lambda conn: self.t.operator_decide(conn, job_id, decision=decision, actor=OPERATOR)
        )
        target = self.expect(job, f"operator_{decision}", outcome)
        if target is not None:
            self.move(job, target)

    @precondition(lambda self: self.some("approve"))
    @rule(pick=PICK, approve=st.booleans())
    def review(self, pick: Pick, approve: bool) -> None:
        job_id = self.choose(pick, "approve")
        job = self.models[job_id]
        if approve:
            outcome = self.tx(lambda conn: self.t.approve(conn, job_id, actor=OPERATOR))
        else:
            outcome = self.tx(lambda conn: self.t.reject(conn, job_id, actor=OPERATOR))
        name = "approve" if approve else "reject"
        if job.state == JobState.WAITING and job.wait_reason != Reason.REVIEW:
            # Only a review wait is decided by a review (an external wait is not).
            assert outcome == Rejected(name, RejectReason.ILLEGAL, job.state)
            event(f"{name}: not a review wait")
            return
        if job.state == JobState.WAITING and self.offset() >= (job.wait_deadline or 0.0):
            # Past its deadline the wait's rule decides (the sweeper's move), not a review.
            assert outcome == Rejected(name, RejectReason.ILLEGAL, job.state)
            event(f"{name}: after the deadline")
            return
        target = self.expect(job, name, outcome)
        if target is not None:
            self.move(job, target)

    # -- cancel and publish meeting in two connections --------------------------------

    @precondition(lambda self: self.some("publish"))
    @rule(pick=PICK, commit=st.booleans())
    def cancel_during_publication(self, pick: Pick, commit: bool) -> None:
        """The publisher holds the row; a cancel cannot get in (it times out here, it
        would wait in production); then the publisher commits or rolls back."""
        job_id = self.choose(pick, "publish")
        job = self.models[job_id]
        attempt = self.attempt(job, "current")
        before = self.snapshot(job_id)

        async def go() -> tuple[bool, Any]:
            async with self.engine.connect() as publisher, self.engine.connect() as canceler:
                await publisher.begin()
                locked = await self.t.lock_for_publication(publisher, job_id, attempt)
                if not locked:
                    await publisher.rollback()
                    return False, None
                await canceler.begin()
                await canceler.execute(text("SET LOCAL lock_timeout = '25ms'"))
                with pytest.raises(DBAPIError) as blocked:  # a cancel cannot get past it
                    await self.t.request_cancel(canceler, job_id, actor=CLIENT)
                assert getattr(blocked.value.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE
                await canceler.rollback()
                outcome = await self.t.publish(
                    publisher,
                    job_id,
                    attempt,
                    result_ref={"bundle": str(job_id)},
                    ttl_seconds=3600,
                    actor=WORKER,
                )
                if commit:
                    await publisher.commit()
                else:
                    await publisher.rollback()
                return True, outcome

        locked, outcome = self.run(go())
        assert locked == self.holds(job, attempt)
        if not locked or not commit:
            assert self.snapshot(job_id) == before
            return
        if job.delivery == DeliveryState.PARTIAL_PRIVATE:  # a partial package: refused
            assert outcome == Rejected("publish", RejectReason.ILLEGAL, job.state)
            assert self.snapshot(job_id) == before
            return
        target = self.expect(job, "publish", outcome, attempt)
        assert target == JobState.SUCCEEDED
        self.move(job, target)
        job.delivery = DeliveryState.AVAILABLE
        self.request_cancel_on(job_id)  # the cancel that waited now sees the winner

    @precondition(lambda self: self.some("publish"))
    @rule(pick=PICK, commit=st.booleans())
    def publication_during_cancel(self, pick: Pick, commit: bool) -> None:
        """The cancel holds the row; a publisher that holds the lease cannot lock it
        until the cancel ends (one that does not hold it is refused at once: PostgreSQL
        only waits for rows the statement's condition matches)."""
        job_id = self.choose(pick, "publish")
        job = self.models[job_id]
        attempt = self.attempt(job, "current")
        could_publish = self.holds(job, attempt)
        before = self.snapshot(job_id)

        async def go() -> Any:
            async with self.engine.connect() as canceler, self.engine.connect() as publisher:
                await canceler.begin()
                outcome = await self.t.request_cancel(canceler, job_id, actor=CLIENT)
                await publisher.begin()
                await publisher.execute(text("SET LOCAL lock_timeout = '25ms'"))
                if could_publish:
                    with pytest.raises(DBAPIError) as blocked:
                        await self.t.lock_for_publication(publisher, job_id, attempt)
                    assert getattr(blocked.value.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE
                else:
                    assert not await self.t.lock_for_publication(publisher, job_id, attempt)
                await publisher.rollback()
                if commit:
                    await canceler.commit()
                else:
                    await canceler.rollback()
                return outcome

        outcome = self.run(go())
        if commit:
            self.check_cancel(job, outcome, before)
        else:
            assert self.snapshot(job_id) == before

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def database_agrees(self) -> None:
        async def go() -> list[Any]:
            async with self.engine.connect() as conn:
                rows = await conn.execute(OBSERVE, {"kind": self.kind, "stage": STAGE})
                return list(rows)

        rows = {row.id: row for row in self.run(go())}
        assert set(rows) == set(self.models)
        for job_id, job in self.models.items():
            row = rows[job_id]
            assert row.state == job.state, "state"
            if job.terminal is not None:
                assert row.state == job.terminal, "a terminal state changed"
            assert row.changes == job.changes, "one history row per state change"
            assert row.delivery_state == job.delivery, "delivery"
            if row.state in {JobState.CANCELED, JobState.FAILED}:
                assert row.delivery_state != DeliveryState.AVAILABLE
                assert row.result_ref is None
            assert row.current_attempt_id == job.current, "fencing token"
            assert row.charged_attempts == job.charged, "attempt budget"
            assert row.plan_revision >= job.plan_revision, "plan revision went back"
            assert row.plan_revision == job.plan_revision
            assert row.version >= job.version, "version went back"
            job.version = row.version
            done = row.done or 0
            assert done >= self.seen_done.get(job_id, 0), "done count went back"
            self.seen_done[job_id] = done
            assert done == len(job.units)
            assert row.total == job.total


def test_lifecycle_state_machine(pg_server: Server, template_database: str) -> None:
    name = f"t_machine_{uuid.uuid4().hex[:8]}"
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        url = runner.run(pg_server.create_database(name, template_database))
        engine = create_engine(url, pool_size=3)
        LifecycleMachine.runner = runner
        LifecycleMachine.engine = engine
        try:
            run_state_machine_as_test(
                LifecycleMachine,
                settings=settings(
                    max_examples=int(os.environ.get("ATLAS_MACHINE_EXAMPLES", "40")),
                    stateful_step_count=50,
                    deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                ),
            )
        finally:
            runner.run(engine.dispose())
            runner.run(pg_server.drop_database(name))
