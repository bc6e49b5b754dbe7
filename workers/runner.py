"""Runs one claimed attempt to its end (:class:`JobRunner`): handler, then publication
or a fenced ending.

How an attempt ends (each a named, fenced transition in :mod:`atlas_jobs._app.transitions`):

* handler returns -> safe point -> publication (``lock_for_publication`` -> atomic move
  into the owner's area -> ``publish``, one transaction) -> ``succeeded``;
* :class:`~atlas_jobs._workers.errors.CancelStop` at a safe point -> ``stop_canceled``;
* :class:`~atlas_jobs._workers.errors.ReleaseStop` (shutdown) -> ``release`` (attempt not charged);
* :class:`~atlas_jobs._workers.errors.WaitStop` (a review gate, an external confirmation) ->
``wait``;
* :class:`~atlas_jobs._workers.errors.UnreconciledError` (an external operation's outcome stayed
unknown)
  -> ``give_up`` with reason ``unreconciled`` and the evidence;
* a publication that cannot make the result owner-retrievable (storage refuses) ->
  ``fail`` (``publication_failed``): delivery ``blocked``, never a silent retry loop;
* :class:`~atlas_jobs._workers.errors.PermanentError` -> ``fail``; so does a move the lifecycle
  refuses while the attempt still holds the job (``illegal_move``: a delivery going
  backwards, a partial package handed to publication);
* any other exception -> ``recover``: ``retry_later`` with backoff while the budget
  lasts, else ``give_up`` -> ``unresolved``;
* :class:`~atlas_jobs._workers.errors.LeaseLost` -> nothing: someone else owns the job now.

A cancel request that arrives while an ending is being written wins over a retry or a
release (the job is not re-queued against its owner's wish): ``stop_canceled`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app import metrics, tracing
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.records import ClaimedJob
from atlas_jobs._app.lifecycle import AttemptOutcome, JobState, Reason
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import ResultStore, StorageError, StoredFile
from atlas_jobs._app.transitions import (
    Actor,
    Applied,
    MoveResult,
    Rejected,
    RejectReason,
    Transitions,
    error_doc,
)
from atlas_jobs._workers import retry
from atlas_jobs._workers.completer import Completer
from atlas_jobs._workers.context import JobContext, raise_if_illegal
from atlas_jobs._workers.errors import (
    CancelStop,
    JobError,
    LeaseLost,
    PermanentError,
    ReleaseStop,
    UnreconciledError,
    WaitStop,
    describe_unknown,
)
from atlas_jobs._workers.handlers.base import Handler, PublishPlan

log = get_logger("atlas.worker.runner")


class _PublicationRefusedError(Exception):
    """The publish compare-and-set matched no row: roll the transaction back."""

    def __init__(self, outcome: Rejected) -> None:
        super().__init__(str(outcome))
        self.outcome = outcome


class JobRunner:
    """Runs attempts for one worker process. Stateless between attempts."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        transitions: Transitions,
        store: ResultStore,
        settings: Settings,
        handlers: Mapping[str, Handler],
        actor: Actor,
        completer: Completer | None = None,
        on_publishing: Callable[[JobContext], None] | None = None,
    ) -> None:
        self.completer = completer
        self.on_publishing = on_publishing
        self.engine = engine
        self.transitions = transitions
        self.store = store
        self.settings = settings
        self.handlers = handlers
        self.actor = actor

    def context(self, claimed: ClaimedJob) -> JobContext:
        """The context of a claimed attempt."""
        return JobContext(
            claimed,
            engine=self.engine,
            transitions=self.transitions,
            store=self.store,
            settings=self.settings,
            actor=self.actor,
        )

    async def execute(self, ctx: JobContext) -> None:
        """Run the attempt (in a span, tracing on) and count its outcome; never raises:
        an ending that could not be written is logged and left to the reaper."""
        try:
            if tracing.enabled():
                outcome = await self._run_traced(ctx)
            else:  # no span to open, no creation trace to read
                outcome = await self.run(ctx)
            metrics.record_attempt(ctx.job.kind, outcome.value)
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # an ending could not be written: the reaper recovers it
            log.error("job.ending_failed", job_id=str(ctx.job_id), error_class=type(exc).__name__)

    async def _run_traced(self, ctx: JobContext) -> AttemptOutcome:
        """The attempt in a span parented to its job's creation request."""
        with tracing.attempt_span(
            await self._traceparent(ctx),
            job_id=str(ctx.job_id),
            attempt_id=str(ctx.attempt_id),
            kind=ctx.job.kind,
            attempt=ctx.job.attempt,
        ):
            return await self.run(ctx)

    async def _traceparent(self, ctx: JobContext) -> str | None:
        """The trace the job's creation belongs to (one read per attempt, tracing on)."""
        if not tracing.enabled():
            return None
        try:
            async with self.engine.connect() as conn:
                return await reads.creation_traceparent(conn, ctx.job_id)
        except Exception:  # the attempt runs anyway, in a trace of its own
            return None

    async def run(self, ctx: JobContext) -> AttemptOutcome:
        """Run the attempt and write exactly one ending (or none, if the lease is lost)."""
        job = ctx.job
        handler = self.handlers.get(f"{job.kind}@{job.kind_version}")
        try:
            if handler is None:  # the claim filter makes this unreachable in practice
                raise PermanentError("no_handler", f"no handler for {job.kind}@{job.kind_version}")
            # A job may have waited in the pool's local queue: whatever was seen
            # meanwhile (a cancel, a lost lease, a shutdown) stops it before any work.
            await ctx.safe_point()
            plan = await handler(ctx)
            await ctx.safe_point()
            return await self._publish(ctx, plan)
        except LeaseLost:
            return self._lost(ctx)
        except CancelStop:
            return await self._cancel(ctx)
        except ReleaseStop:
            return await self._release(ctx)
        except WaitStop as stop:
            return await self._wait(ctx, stop)
        except UnreconciledError as exc:
            return await self._unreconciled(ctx, exc.as_doc())
        except PermanentError as exc:
            return await self._fail(ctx, exc.as_doc())
        except asyncio.CancelledError:
            if ctx.lost:
                return self._lost(ctx)
            if ctx.draining:  # shutdown past its grace period: hand the job back
                return await self._release(ctx)
            raise
        except Exception as exc:
            error = exc.as_doc() if isinstance(exc, JobError) else describe_unknown(exc)
            if not isinstance(exc, JobError):
                log.warning(
                    "job.unexpected_error",
                    job_id=str(job.job_id),
                    attempt_id=str(job.attempt_id),
                    error_class=type(exc).__name__,
                )
            return await self._recover(ctx, error)

    # -- publication ------------------------------------------------------------------

    async def _publish(self, ctx: JobContext, plan: PublishPlan) -> AttemptOutcome:
        if plan.announce:
            await ctx.enter_stage("publish")
        # Nothing to move and nothing to wait for: join the next group commit. If the
        # batch refuses it (without saying why), the one-job path below finds out: a
        # lost lease, or a result the lifecycle will not publish.
        simple = not plan.files and plan.hold_seconds <= 0 and plan.reference is None
        completer = self.completer if simple else None
        ctx.publishing = True
        ctx.group_commit = completer is not None
        if self.on_publishing is not None:
            self.on_publishing(ctx)
        # Not shielded: the batch commits this publication whatever happens to this task;
        # a cancel (the lease lost) only cancels the wait, and the completer skips a
        # cancelled future.
        if completer is not None and await completer.publish(ctx):
            return AttemptOutcome.SUCCEEDED
        # Shielded: once the row lock is taken the publication runs to its commit,
        # whatever happens to this task (a cancel request, a shutdown).
        try:
            published = await asyncio.shield(self._publication(ctx, plan))
        except _PublicationRefusedError as refused:
            if plan.files:  # moved into the owner's area, but never published
                await asyncio.to_thread(self.store.remove_published, ctx.job.owner, ctx.job_id)
            raise_if_illegal(refused.outcome)  # still ours: fail (a partial package)
            published = False
        except StorageError as exc:
            # Owner retrieval cannot be established (the transaction rolled back): the
            # job fails with a readable error and its private outputs become blocked.
            # Only the store's own failures land here: a database connection lost
            # during the publication (an OSError too) is an uncertain outcome, left to
            # the recovery below, whose fenced ending reads what the database holds.
            await asyncio.to_thread(self.store.remove_published, ctx.job.owner, ctx.job_id)
            log.warning(
                "job.publication_failed", job_id=str(ctx.job_id), error_class=type(exc).__name__
            )
            return await self._fail(
                ctx,
                error_doc(
                    "publication_failed",
                    f"the result could not be made retrievable ({type(exc).__name__})",
                    retryable=False,
                ),
            )
        if not published:
            return self._lost(ctx)
        log.info("job.succeeded", job_id=str(ctx.job_id), attempt_id=str(ctx.attempt_id))
        return AttemptOutcome.SUCCEEDED

    async def _move_into_owner_area(self, ctx: JobContext) -> list[StoredFile]:
        try:
            return await asyncio.to_thread(self.store.publish, ctx.job.owner, ctx.job_id)
        except OSError as exc:  # the disk (or the store's socket), not the database
            raise StorageError(f"publishing the files failed: {type(exc).__name__}") from exc

    async def _publication(self, ctx: JobContext, plan: PublishPlan) -> bool:
        t = self.transitions
        async with self.engine.begin() as conn:
            if not await t.lock_for_publication(conn, ctx.job_id, ctx.attempt_id):
                return False
            if plan.hold_seconds > 0:
                await asyncio.sleep(plan.hold_seconds)
            files = await self._move_into_owner_area(ctx) if plan.files else []
            outcome = await t.publish(
                conn,
                ctx.job_id,
                ctx.attempt_id,
                result_ref={"files": [f.as_dict() for f in files], **(plan.reference or {})},
                ttl_seconds=self.settings.result_ttl_seconds,
                actor=self.actor,
            )
            if not isinstance(outcome, Applied):  # the row is locked: an illegal move
                raise _PublicationRefusedError(outcome)
        return True

    # -- endings ------------------------------------------------------------------------

    async def _end(
        self, ctx: JobContext, write: Callable[[AsyncConnection], Awaitable[MoveResult]]
    ) -> MoveResult:
        async def transaction() -> MoveResult:
            async with self.engine.begin() as conn:
                return await write(conn)

        return await asyncio.shield(transaction())

    async def _cancel(self, ctx: JobContext) -> AttemptOutcome:
        t = self.transitions
        outcome = await self._end(
            ctx, lambda c: t.stop_canceled(c, ctx.job_id, ctx.attempt_id, actor=self.actor)
        )
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        await self._discard_private_outputs(ctx)
        log.info("job.canceled", job_id=str(ctx.job_id), attempt_id=str(ctx.attempt_id))
        return AttemptOutcome.CANCELED

    async def _release(self, ctx: JobContext) -> AttemptOutcome:
        t = self.transitions
        outcome = await self._end(
            ctx, lambda c: t.release(c, ctx.job_id, ctx.attempt_id, actor=self.actor)
        )
        if _cancel_pending(outcome):
            return await self._cancel(ctx)
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        log.info("job.released", job_id=str(ctx.job_id), attempt_id=str(ctx.attempt_id))
        return AttemptOutcome.RELEASED

    async def _wait(self, ctx: JobContext, stop: WaitStop) -> AttemptOutcome:
        t = self.transitions
        outcome = await self._end(
            ctx,
            lambda c: t.wait(
                c,
                ctx.job_id,
                ctx.attempt_id,
                reason=Reason(stop.reason),
                deadline_seconds=stop.deadline_seconds,
                on_deadline=stop.on_deadline,
                actor=self.actor,
            ),
        )
        if _cancel_pending(outcome):
            return await self._cancel(ctx)
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        log.info("job.waiting", job_id=str(ctx.job_id), reason=stop.reason)
        return AttemptOutcome.WAITING

    async def _unreconciled(self, ctx: JobContext, error: dict[str, Any]) -> AttemptOutcome:
        if ctx.cancel_requested:
            return await self._cancel(ctx)
        t = self.transitions
        outcome = await self._end(
            ctx,
            lambda c: t.give_up(
                c,
                ctx.job_id,
                ctx.attempt_id,
                error=error,
                reason=Reason.UNRECONCILED,
                actor=self.actor,
            ),
        )
        if _cancel_pending(outcome):
            return await self._cancel(ctx)
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        log.info("job.unreconciled", job_id=str(ctx.job_id))
        return AttemptOutcome.UNRESOLVED

    async def _fail(self, ctx: JobContext, error: dict[str, Any]) -> AttemptOutcome:
        t = self.transitions
        outcome = await self._end(
            ctx,
            lambda c: t.fail(c, ctx.job_id, ctx.attempt_id, error=error, actor=self.actor),
        )
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        await self._discard_private_outputs(ctx)
        log.info(
            "job.failed", job_id=str(ctx.job_id), attempt_id=str(ctx.attempt_id), code=error["code"]
        )
        return AttemptOutcome.FAILED

    async def _recover(self, ctx: JobContext, error: dict[str, Any]) -> AttemptOutcome:
        """A recoverable error: retry later or give up -- the transition service decides
        by the one budget rule, on database time."""
        if ctx.cancel_requested:
            return await self._cancel(ctx)
        job, t = ctx.job, self.transitions
        delay = retry.kind_backoff(job.kind, job.charged_attempts, version=job.kind_version)
        outcome = await self._end(
            ctx,
            lambda c: t.recover(
                c, ctx.job_id, ctx.attempt_id, error=error, delay_seconds=delay, actor=self.actor
            ),
        )
        result = (
            AttemptOutcome.UNRESOLVED
            if isinstance(outcome, Applied) and outcome.to_state == JobState.UNRESOLVED
            else AttemptOutcome.RETRY
        )
        if _cancel_pending(outcome):
            return await self._cancel(ctx)
        if not isinstance(outcome, Applied):
            return self._lost(ctx)
        metrics.RETRIES.labels(job.kind, error["code"], result.value).inc()
        log.info(
            "job.attempt_ended",
            job_id=str(ctx.job_id),
            attempt_id=str(ctx.attempt_id),
            outcome=result.value,
            code=error["code"],
        )
        return result

    def _lost(self, ctx: JobContext) -> AttemptOutcome:
        ctx.mark_lost()
        log.warning("job.lease_lost", job_id=str(ctx.job_id), attempt_id=str(ctx.attempt_id))
        return AttemptOutcome.LOST

    async def _discard_private_outputs(self, ctx: JobContext) -> None:
        """Outputs of a failed or canceled job are ``blocked``: remove them now (the
        sweeper removes whatever a crash leaves behind)."""
        await asyncio.to_thread(self.store.remove_staging, ctx.job_id)


def _cancel_pending(outcome: MoveResult) -> bool:
    return (
        isinstance(outcome, Rejected)
        and outcome.reason == RejectReason.ILLEGAL
        and outcome.current == JobState.CANCEL_REQUESTED
    )
