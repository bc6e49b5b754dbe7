"""What a handler sees: :class:`Context` (``async def`` handlers) and :class:`SyncContext`
(plain ``def`` handlers, run in a thread).

Every write goes through the engine's fenced transitions: it counts only while this
attempt still holds the job (its lease, its attempt id). Once the lease is lost -- the
attempt timed out, the worker was presumed dead and the job claimed again -- every
further write raises :class:`LeaseLost`, and the handler should simply let it propagate.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import structlog
from pydantic import BaseModel

from atlas_jobs._app.db import reads
from atlas_jobs._app.lifecycle import DeliveryState, Reason
from atlas_jobs._workers.errors import LeaseLost, PermanentError, WaitStop
from atlas_jobs._workers.external import Operation, Receipt

if TYPE_CHECKING:
    from atlas_jobs._workers.context import JobContext
    from atlas_jobs.declaration import Kind

InputT = TypeVar("InputT", bound=BaseModel)
T = TypeVar("T")

Outputs = Literal["partial", "complete"]
"""How far the private outputs are: ``partial`` (some files exist) or ``complete`` (the
package is whole, waiting for publication). Neither is downloadable before publication."""

DeadlineRule = Literal["fail", "escalate"]
"""What a passed wait deadline does: ``fail`` the job, or ``escalate`` it to
``unresolved`` for an operator."""

_OUTPUTS: Mapping[str, DeliveryState] = {
    "partial": DeliveryState.PARTIAL_PRIVATE,
    "complete": DeliveryState.STAGED_PRIVATE,
}


@dataclass(frozen=True, slots=True)
class Signal:
    """An external event delivered with ``POST /v1/jobs/{id}/signals``."""

    event_id: str
    data: Mapping[str, Any] | None


class Context(Generic[InputT]):
    """One attempt of one job, as its handler sees it.

    Progress: :meth:`plan` declares each stage's total, :meth:`enter` names the stage
    now running, :meth:`unit_done` records a unit durably (a checkpoint that survives a
    crash or a retry: :meth:`is_done` says so on the next attempt), :meth:`expand_plan`
    grows a stage's total (the job's plan revision increments; done units are kept).

    Safe points: :meth:`safe_point` (between units) stops the attempt when a cancel was
    requested, the worker shuts down or the lease was lost -- by raising, so do not
    catch ``BaseException`` around it. :meth:`begin_publication` marks the point of no
    return: from there on a cancel loses and the job publishes.
    """

    def __init__(self, job: JobContext, kind: Kind[InputT], input: InputT) -> None:
        self._job = job
        self._kind = kind
        self._input = input

    @cached_property
    def log(self) -> structlog.stdlib.BoundLogger:
        """A logger bound to the job id, the attempt id and the kind. Never log the
        input: it may be confidential."""
        logger: structlog.stdlib.BoundLogger = structlog.get_logger("atlas.job").bind(
            job_id=str(self._job.job_id), attempt_id=str(self._job.attempt_id), kind=self._kind.key
        )
        return logger

    # -- identity ---------------------------------------------------------------------

    @property
    def job_id(self) -> uuid.UUID:
        return self._job.job_id

    @property
    def attempt_id(self) -> uuid.UUID:
        """This attempt's id: the fencing token of every write it makes."""
        return self._job.attempt_id

    @property
    def attempt(self) -> int:
        """1-based: the how-many-th claim of this job this attempt is."""
        return self._job.attempt

    @property
    def kind(self) -> Kind[InputT]:
        return self._kind

    @property
    def input(self) -> InputT:
        """The job's input, validated against the kind's model."""
        return self._input

    @property
    def cancel_requested(self) -> bool:
        """A cancel was requested (the next :meth:`safe_point` stops the attempt)."""
        return self._job.cancel_requested

    # -- progress -----------------------------------------------------------------------

    async def plan(self, totals: Mapping[str, int] | None = None, **more: int) -> None:
        """Each declared stage's total, e.g. ``await ctx.plan(fetch=1, render=3)``.
        A retried attempt keeps the plan (and its revision) of the first."""
        wanted = {**(totals or {}), **more}
        stages = []
        for stage in self._kind.stages:
            if stage.name not in wanted:
                raise PermanentError("undeclared_plan", f"no total for stage {stage.name!r}")
            stages.append((stage.name, stage.unit, int(wanted.pop(stage.name))))
        if wanted:
            raise PermanentError("undeclared_stage", f"undeclared stages: {sorted(wanted)}")
        await self._job.set_plan(stages)

    async def enter(self, stage: str) -> None:
        """The stage now running (what the status and its label name)."""
        await self._job.enter_stage(self._declared(stage))

    async def unit_done(
        self,
        stage: str,
        unit: str,
        *,
        data: Mapping[str, Any] | None = None,
        outputs: Outputs | None = None,
    ) -> None:
        """A unit is done, durably, with optional small JSON ``data`` kept for later
        attempts (:meth:`checkpoint_data`) and, in the same transaction, how far the
        private outputs are now."""
        delivery = _OUTPUTS[outputs] if outputs is not None else None
        await self._job.checkpoint(self._declared(stage), unit, data=data, delivery=delivery)

    def is_done(self, stage: str, unit: str) -> bool:
        """Whether this or an earlier attempt recorded the unit done."""
        return self._job.done(stage, unit)

    def checkpoint_data(self, stage: str, unit: str) -> Mapping[str, Any] | None:
        """The ``data`` recorded with a done unit (``None`` when none or not done)."""
        return self._job.checkpoint_data(stage, unit)

    async def expand_plan(self, stage: str, total: int) -> None:
        """The stage found more units: its total grows to ``total`` (never shrinks)."""
        await self._job.expand_plan(self._declared(stage), total)

    async def outputs_complete(self) -> None:
        """The private package is whole (``staged_private``), without a unit to record."""
        await self._job.stage_output(DeliveryState.STAGED_PRIVATE)

    # -- safe points ------------------------------------------------------------------

    async def safe_point(self) -> None:
        """Stop here if a cancel was requested, the worker is shutting down or the lease
        is lost. Call it between units, where nothing is half done."""
        await self._job.safe_point()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; ends early (raising) only when the lease is lost."""
        await self._job.sleep(seconds)

    async def begin_publication(self) -> None:
        """From here on the job publishes: a cancel that arrives now loses (it is kept in
        the history) and no safe point stops the attempt. The status names the
        ``publish`` stage ("Publishing")."""
        await self._job.enter_stage("publish")
        self._job.past_no_return = True

    # -- private files --------------------------------------------------------------------

    async def write_file(self, name: str, data: bytes) -> None:
        """Write a private output file; :class:`~atlas_jobs.Result` ``(files=True)``
        publishes every such file atomically. Write the same bytes for the same job in
        every attempt: a stale attempt rewriting a file is then harmless."""
        await self._job.write_file(name, data)

    async def has_file(self, name: str) -> bool:
        return await self._job.has_file(name)

    async def read_file(self, name: str) -> bytes:
        return await self._job.read_file(name)

    # -- external operations and waits ------------------------------------------------

    async def perform(self, operation: Operation) -> Receipt:
        """Make ``operation`` happen exactly once at its configured destination: a stable
        operation id (the same in every attempt, sent as ``Idempotency-Key``), recorded
        before the request leaves, and an uncertain outcome reconciled (looked up at the
        destination) before any repeat. A destination that confirms later (``202``) makes
        the job wait for the signal that confirms it."""
        return await self._job.external.perform(operation)

    async def review(self, *, deadline_seconds: float, on_deadline: DeadlineRule) -> None:
        """Return when a reviewer approved the job; until then the job waits
        (``waiting``, reason ``review``) with the deadline and its rule. The handler
        runs again from the start after the approval: record the units before the gate
        with :meth:`unit_done` so they are not repeated."""
        if not await self._job.review_approved():
            raise self._job.wait_for_review(
                deadline_seconds=deadline_seconds, on_deadline=on_deadline
            )

    async def wait_for_signal(
        self, *, deadline_seconds: float, on_deadline: DeadlineRule
    ) -> Signal:
        """The external event this job waits for: returns the newest signal received
        since its last wait began; until one arrives the job waits (``waiting``, reason
        ``external``) with the deadline and its rule. Like :meth:`review`, the handler
        runs again from the start when the signal arrives."""
        async with self._job.engine.connect() as conn:
            found = await reads.signal_since_last_wait(conn, self._job.job_id)
        if found is None:
            raise WaitStop(
                Reason.EXTERNAL, deadline_seconds=deadline_seconds, on_deadline=on_deadline
            )
        return Signal(event_id=found.event_id, data=found.data)

    def _declared(self, stage: str) -> str:
        if self._kind.stages and all(s.name != stage for s in self._kind.stages):
            raise PermanentError("undeclared_stage", f"stage {stage!r} is not declared")
        return stage


class SyncContext(Generic[InputT]):
    """:class:`Context` for a plain ``def`` handler, which runs in a thread of its own:
    the same methods, each blocking until the worker's event loop has done it."""

    def __init__(self, context: Context[InputT], loop: asyncio.AbstractEventLoop) -> None:
        self._context = context
        self._loop = loop
        self.abandoned = False
        """Set when the attempt timed out: every further call raises :class:`LeaseLost`."""

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.abandoned:
            coro.close()
            raise LeaseLost(str(self._context.job_id))
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result()

    @property
    def log(self) -> structlog.stdlib.BoundLogger:
        return self._context.log

    @property
    def job_id(self) -> uuid.UUID:
        return self._context.job_id

    @property
    def attempt_id(self) -> uuid.UUID:
        return self._context.attempt_id

    @property
    def attempt(self) -> int:
        return self._context.attempt

    @property
    def kind(self) -> Kind[InputT]:
        return self._context.kind

    @property
    def input(self) -> InputT:
        return self._context.input

    @property
    def cancel_requested(self) -> bool:
        return self._context.cancel_requested

    def plan(self, totals: Mapping[str, int] | None = None, **more: int) -> None:
        self._call(self._context.plan(totals, **more))

    def enter(self, stage: str) -> None:
        self._call(self._context.enter(stage))

    def unit_done(
        self,
        stage: str,
        unit: str,
        *,
        data: Mapping[str, Any] | None = None,
        outputs: Outputs | None = None,
    ) -> None:
        self._call(self._context.unit_done(stage, unit, data=data, outputs=outputs))

    def is_done(self, stage: str, unit: str) -> bool:
        return self._context.is_done(stage, unit)

    def checkpoint_data(self, stage: str, unit: str) -> Mapping[str, Any] | None:
        return self._context.checkpoint_data(stage, unit)

    def expand_plan(self, stage: str, total: int) -> None:
        self._call(self._context.expand_plan(stage, total))

    def outputs_complete(self) -> None:
        self._call(self._context.outputs_complete())

    def safe_point(self) -> None:
        self._call(self._context.safe_point())

    def sleep(self, seconds: float) -> None:
        self._call(self._context.sleep(seconds))

    def begin_publication(self) -> None:
        self._call(self._context.begin_publication())

    def write_file(self, name: str, data: bytes) -> None:
        self._call(self._context.write_file(name, data))

    def has_file(self, name: str) -> bool:
        return self._call(self._context.has_file(name))

    def read_file(self, name: str) -> bytes:
        return self._call(self._context.read_file(name))

    def perform(self, operation: Operation) -> Receipt:
        return self._call(self._context.perform(operation))

    def review(self, *, deadline_seconds: float, on_deadline: DeadlineRule) -> None:
        self._call(self._context.review(deadline_seconds=deadline_seconds, on_deadline=on_deadline))

    def wait_for_signal(self, *, deadline_seconds: float, on_deadline: DeadlineRule) -> Signal:
        return self._call(
            self._context.wait_for_signal(
                deadline_seconds=deadline_seconds, on_deadline=on_deadline
            )
        )


__all__ = ["Context", "DeadlineRule", "Outputs", "Signal", "SyncContext"]
