"""A declared kind (:class:`atlas_jobs.Kind`) as the engine's handler.

The engine runs handlers of one shape (:data:`~atlas_jobs._workers.handlers.base.Handler`,
an ``async`` function of the attempt's :class:`~atlas_jobs._workers.context.JobContext`
returning a :class:`~atlas_jobs._workers.handlers.base.PublishPlan`). This module makes
one of a declaration, and holds what the declaration promises:

* the input is validated against the kind's model (``invalid_input``: permanent);
* an ``async def`` handler runs on the loop, a plain ``def`` in a thread of its own,
  with a :class:`~atlas_jobs.SyncContext`;
* an attempt past the kind's ``timeout`` is cancelled (a thread cannot be: it is
  abandoned, and every later call of its context raises ``LeaseLost``) and ends as a
  transient ``attempt_timed_out``, retried per the policy;
* an exception is classified by the kind's retry policy; one listed nowhere is a
  transient ``unexpected_error`` whose class and message -- never the input -- reach the
  history;
* what the handler returns must be a :class:`~atlas_jobs.Result` of its kind (or
  ``None`` for a kind without a result model): anything else fails the attempt
  permanently (``invalid_result``), and the worker keeps running.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from atlas_jobs._app.logs import get_logger
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import (
    JobError,
    PermanentError,
    RecoverableError,
    StopJob,
)
from atlas_jobs._workers.handlers.base import NO_FILES, Handler, PublishPlan
from atlas_jobs.context import Context, SyncContext
from atlas_jobs.declaration import Kind, Result

log = get_logger("atlas.worker.kinds")

MAX_MESSAGE_CHARS = 300
RESERVED_REFERENCE_KEYS = frozenset({"files"})
THREADS = 64
"""Threads for plain ``def`` handlers, shared by the kinds of a process; an abandoned
(timed-out) handler keeps its thread until it returns."""

TIMEOUT_TICK_SECONDS = 0.05
"""How often the attempts of a loop are checked against their deadlines."""

_executor: ThreadPoolExecutor | None = None


class _Deadlines:
    """The attempts of one event loop that have a deadline, checked every
    :data:`TIMEOUT_TICK_SECONDS` by one timer: an attempt past its deadline is cancelled
    (its handler sees ``CancelledError`` at its current ``await``). Cheaper per job than a
    timer of its own (``asyncio.timeout`` schedules and cancels one per attempt)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.deadlines: dict[asyncio.Task[Any], float] = {}
        self.expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, task: asyncio.Task[Any], seconds: float) -> None:
        self.deadlines[task] = self.loop.time() + seconds
        if self._timer is None:
            self._timer = self.loop.call_later(TIMEOUT_TICK_SECONDS, self._check)

    def forget(self, task: asyncio.Task[Any]) -> bool:
        """Stop watching ``task``; whether its deadline had passed (and it was cancelled)."""
        self.deadlines.pop(task, None)
        if task in self.expired:
            self.expired.discard(task)
            return True
        return False

    def _check(self) -> None:
        self._timer = None
        now = self.loop.time()
        for task, deadline in list(self.deadlines.items()):
            if deadline <= now and task not in self.expired:
                self.expired.add(task)
                task.cancel()
        if self.deadlines:
            self._timer = self.loop.call_later(TIMEOUT_TICK_SECONDS, self._check)


_deadlines: dict[asyncio.AbstractEventLoop, _Deadlines] = {}


def _deadlines_of(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    found = _deadlines.get(loop)
    if found is None:
        for old in [other for other in _deadlines if other.is_closed()]:
            del _deadlines[old]
        found = _deadlines[loop] = _Deadlines(loop)
    return found


def _threads() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="atlas-job")
    return _executor


def handler_of(kind: Kind[Any]) -> Handler:
    """The engine's handler for ``kind``."""
    is_async = kind.is_async

    async def run(job: JobContext) -> PublishPlan:
        try:
            data = kind.input.model_validate(job.input)
        except ValidationError:
            raise PermanentError("invalid_input", f"the input does not match {kind.key}") from None
        if kind.stages:
            await job.load_checkpoints()
        context = Context(job, kind, data)
        try:
            value = await (
                _call_async(kind, context, job) if is_async else _call_sync(kind, context)
            )
        except (StopJob, JobError):
            raise
        except Exception as exc:
            raise _classified(kind, exc) from exc
        return _plan(kind, value)

    run.__qualname__ = f"handler_of({kind.key})"
    return run


async def _call_async(kind: Kind[Any], context: Context[Any], job: JobContext) -> object:
    handler = cast("Callable[[Context[Any]], Awaitable[object]]", kind.handler)
    if kind.timeout is None:
        return await handler(context)
    task = asyncio.current_task()
    assert task is not None
    deadlines = _deadlines_of(asyncio.get_running_loop())
    deadlines.watch(task, kind.timeout)
    try:
        return await handler(context)
    except asyncio.CancelledError:
        if not deadlines.forget(task) or job.lost:  # cancelled for another reason
            raise
        task.uncancel()
        raise _timed_out(kind) from None
    finally:
        deadlines.forget(task)


async def _call_sync(kind: Kind[Any], context: Context[Any]) -> object:
    loop = asyncio.get_running_loop()
    sync = SyncContext(context, loop)
    future = loop.run_in_executor(_threads(), kind.handler, sync)
    future.add_done_callback(_consume)
    try:
        return await asyncio.wait_for(asyncio.shield(future), kind.timeout)
    except TimeoutError:
        if future.done():  # the handler itself raised TimeoutError
            return future.result()
        sync.abandoned = True
        raise _timed_out(kind) from None
    except asyncio.CancelledError:
        sync.abandoned = True  # lease lost or shutdown: the thread writes nothing more
        raise


def _consume(future: asyncio.Future[Any]) -> None:
    """An abandoned thread's outcome is nobody's: read it so it is not reported."""
    if not future.cancelled():
        future.exception()


def _timed_out(kind: Kind[Any]) -> RecoverableError:
    log.warning("job.attempt_timed_out", kind=kind.key, timeout_seconds=kind.timeout)
    return RecoverableError(
        "attempt_timed_out", f"the attempt ran past its {kind.timeout:g} s timeout"
    )


def _classified(kind: Kind[Any], exc: Exception) -> JobError:
    text = str(exc)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    found = kind.retry.classify(exc)
    if found is None:
        log.warning("job.unexpected_error", kind=kind.key, error_class=type(exc).__name__)
        return RecoverableError("unexpected_error", message)
    code, retryable = found
    return RecoverableError(code, message) if retryable else PermanentError(code, message)


def _plan(kind: Kind[Any], value: object) -> PublishPlan:
    if value is None and kind.result is None:
        return NO_FILES
    if not isinstance(value, Result):
        raise PermanentError(
            "invalid_result",
            f"the handler of {kind.key} returned {type(value).__name__}, not a Result",
        )
    reference = _reference(kind, value.reference)
    if not value.files and not reference:
        return NO_FILES
    return PublishPlan(files=value.files, reference=reference)


def _reference(kind: Kind[Any], reference: BaseModel | Mapping[str, Any] | None) -> dict[str, Any]:
    if kind.result is not None:
        if reference is None:
            raise PermanentError(
                "invalid_result", f"{kind.key} declares a result, and the handler returned none"
            )
        raw = reference.model_dump(mode="json") if isinstance(reference, BaseModel) else reference
        try:
            return kind.result.model_validate(raw).model_dump(mode="json")
        except ValidationError:
            raise PermanentError(
                "invalid_result", f"the result does not match {kind.key}'s result model"
            ) from None
    if reference is None:
        return {}
    found = (
        reference.model_dump(mode="json") if isinstance(reference, BaseModel) else dict(reference)
    )
    try:
        json.dumps(found)
    except (TypeError, ValueError):
        raise PermanentError(
            "invalid_result", f"the result reference of {kind.key} is not JSON"
        ) from None
    if RESERVED_REFERENCE_KEYS & found.keys():
        raise PermanentError("invalid_result", "a result reference cannot hold 'files'")
    return found
