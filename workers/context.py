"""What job code sees: :class:`JobContext`, the only door from a handler to the database.

Every write a handler makes goes through a fenced transition (attempt id + live lease).
A write that matches no row means the lease is gone: the context marks itself lost and
raises :class:`~atlas_jobs._workers.errors.LeaseLost`, and from then on writes nothing.

Database writes are shielded from task cancellation: when the pool cancels a job task
(lease lost, shutdown past its grace period) a statement already sent completes or rolls
back on its own instead of leaving a connection mid-protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.db import reads
from atlas_jobs._app.db.records import ClaimedJob
from atlas_jobs._app.lifecycle import ACTIVE_STATES, DeliveryState, JobState, Reason, TransitionName
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import ResultStore, StoredFile
from atlas_jobs._app.transitions import (
    Actor,
    Applied,
    MoveResult,
    OperationEntry,
    Rejected,
    RejectReason,
    Transitions,
)
from atlas_jobs._workers.errors import CancelStop, LeaseLost, PermanentError, ReleaseStop, WaitStop
from atlas_jobs._workers.external import ExternalOperations

T = TypeVar("T")


def raise_if_illegal(outcome: Rejected) -> None:
    """A move refused while the attempt still holds the job: the lifecycle will not have
    it (e.g. a delivery going backwards, a partial package published) -- a defect of the
    handler, never retried. Any other refusal means the lease is gone."""
    if outcome.reason == RejectReason.ILLEGAL and outcome.current in ACTIVE_STATES:
        raise PermanentError("illegal_move", f"{outcome.transition} was refused")


class JobContext:
    """Handed to a handler for one attempt: progress, checkpoints, staging, safe points."""

    def __init__(
        self,
        job: ClaimedJob,
        *,
        engine: AsyncEngine,
        transitions: Transitions,
        store: ResultStore,
        settings: Settings,
        actor: Actor,
    ) -> None:
        self.job = job
        self.engine = engine
        self.transitions = transitions
        self.store = store
        self.settings = settings
        self.actor = actor
        self.cancel_requested = False
        self.draining = False
        self.publishing = False
        self.group_commit = False
        """Its publication waits in the completer's group commit (no connection of its
        own), not in a transaction of its own."""
        self.past_no_return = False
        """An external publication has started: a cancel or a drain no longer stops the
        job at a safe point (docs/protocol.md §5: a cancel that arrives during publication
        loses)."""
        self._lost = asyncio.Event()
        self._checkpoints: dict[tuple[str, str], Any] | None = None

    # -- identity ---------------------------------------------------------------------

    @property
    def job_id(self) -> uuid.UUID:
        return self.job.job_id

    @property
    def attempt_id(self) -> uuid.UUID:
        return self.job.attempt_id

    @property
    def attempt(self) -> int:
        """1-based attempt number of this claim (counts every claim of the job)."""
        return self.job.attempt

    @property
    def input(self) -> Mapping[str, Any]:
        return self.job.input

    # -- signals from the pool ----------------------------------------------------------

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def mark_lost(self) -> None:
        """The lease is gone: interrupt sleeps, refuse every further write."""
        self._lost.set()

    def observe(self, state: JobState) -> None:
        """A state learned from a heartbeat or a fenced write."""
        if state == JobState.CANCEL_REQUESTED:
            self.cancel_requested = True

    # -- safe points and simulated work -----------------------------------------------

    async def safe_point(self) -> None:
        """Between units: stop here if the lease is lost, a cancel was requested or
        the worker is shutting down. Nothing half-done is left behind at this point."""
        if self.lost:
            raise LeaseLost(str(self.job_id))
        if self.past_no_return:
            return
        if self.cancel_requested:
            raise CancelStop(str(self.job_id))
        if self.draining:
            raise ReleaseStop(str(self.job_id))

    async def sleep(self, seconds: float) -> None:
        """Simulated work; returns early only when the lease is lost (then raises)."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), timeout=seconds)
        if self.lost:
            raise LeaseLost(str(self.job_id))

    # -- checkpoints --------------------------------------------------------------------

    async def load_checkpoints(self) -> None:
        """Read the durable checkpoints of earlier attempts (one query per attempt)."""
        async with self.engine.connect() as conn:
            self._checkpoints = await reads.checkpoints(conn, self.job_id)

    def done(self, stage: str, unit: str) -> bool:
        """Whether an earlier attempt (or this one) checkpointed this unit."""
        return self._checkpoints is not None and (stage, unit) in self._checkpoints

    def checkpoint_data(self, stage: str, unit: str) -> Mapping[str, Any] | None:
        """The data checkpointed with a unit (``None`` when none, or not done)."""
        if self._checkpoints is None:
            return None
        data = self._checkpoints.get((stage, unit))
        return data if isinstance(data, Mapping) else None

    # -- fenced writes --------------------------------------------------------------------

    async def _fenced(self, write: Callable[[AsyncConnection], Awaitable[MoveResult]]) -> Applied:
        if self.lost:
            raise LeaseLost(str(self.job_id))

        async def transaction() -> MoveResult:
            async with self.engine.begin() as conn:
                return await write(conn)

        outcome = await asyncio.shield(transaction())
        if isinstance(outcome, Rejected):
            raise_if_illegal(outcome)
            self.mark_lost()
            raise LeaseLost(str(self.job_id))
        self.observe(JobState(outcome.job.state))
        return outcome

    async def set_plan(self, stages: Sequence[tuple[str, str, int]]) -> None:
        """Declare stages ``(name, unit, total)``; a retried attempt keeps the old plan."""
        t = self.transitions
        await self._fenced(
            lambda c: t.set_plan(c, self.job_id, self.attempt_id, stages, actor=self.actor)
        )

    async def enter_stage(self, stage: str) -> None:
        t = self.transitions
        await self._fenced(
            lambda c: t.enter_stage(c, self.job_id, self.attempt_id, stage, actor=self.actor)
        )

    async def checkpoint(
        self,
        stage: str,
        unit: str,
        *,
        data: Mapping[str, Any] | None = None,
        delivery: DeliveryState | None = None,
    ) -> None:
        """A unit is done (durably), and optionally private outputs moved on, in one
        transaction: a crash after this never redoes the unit."""
        t = self.transitions

        async def write(conn: AsyncConnection) -> MoveResult:
            outcome = await t.record_progress(
                conn, self.job_id, self.attempt_id, stage, unit, actor=self.actor, checkpoint=data
            )
            if delivery is not None and isinstance(outcome, Applied):
                outcome = await t.stage_output(
                    conn, self.job_id, self.attempt_id, delivery, actor=self.actor
                )
            return outcome

        await self._fenced(write)
        if self._checkpoints is not None:
            self._checkpoints[(stage, unit)] = dict(data) if data else None

    async def expand_plan(self, stage: str, new_total: int) -> None:
        """The stage found more units: ``total`` grows, ``plan_revision`` increments."""
        t = self.transitions
        await self._fenced(
            lambda c: t.expand_plan(
                c, self.job_id, self.attempt_id, stage, new_total, actor=self.actor
            )
        )

    async def stage_output(self, delivery: DeliveryState) -> None:
        t = self.transitions
        await self._fenced(
            lambda c: t.stage_output(c, self.job_id, self.attempt_id, delivery, actor=self.actor)
        )

    # -- waits and external operations ---------------------------------------------------

    @property
    def external(self) -> ExternalOperations:
        """External operations with stable ids, reconciled before any repeat."""
        return ExternalOperations(self, self.settings.destinations)

    async def record_operation(self, entry: OperationEntry) -> None:
        """One outcome of an external operation: a history entry and the operation's
        row, fenced like every write of this attempt."""
        t = self.transitions
        await self._fenced(
            lambda c: t.record_operation(c, self.job_id, self.attempt_id, entry, actor=self.actor)
        )

    async def review_approved(self) -> bool:
        """Whether a reviewer approved this job (at an earlier review gate)."""
        async with self.engine.connect() as conn:
            return await reads.has_transition(conn, self.job_id, TransitionName.APPROVE)

    def wait_for_review(self, *, deadline_seconds: float, on_deadline: str) -> WaitStop:
        """The stop that makes the job wait for a reviewer (raise it)."""
        return WaitStop(Reason.REVIEW, deadline_seconds=deadline_seconds, on_deadline=on_deadline)

    # -- private files ---------------------------------------------------------------------

    async def write_file(self, name: str, data: bytes) -> StoredFile:
        """Write a private output. Content must be a function of the job alone, so a
        stale attempt writing the same name again is harmless."""
        if self.lost:
            raise LeaseLost(str(self.job_id))
        return await asyncio.to_thread(self.store.write_staged, self.job_id, name, data)

    async def has_file(self, name: str) -> bool:
        return await asyncio.to_thread(self.store.has_staged, self.job_id, name)

    async def read_file(self, name: str) -> bytes:
        return await asyncio.to_thread(self.store.read_staged, self.job_id, name)
