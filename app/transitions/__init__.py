"""The transition service: every state change of every job goes through here.

Each named transition of :data:`atlas_jobs._app.lifecycle.TRANSITIONS` is declared as data there and
applied by the one executor, :mod:`atlas_jobs._app.db.moves`: a compare-and-set on the job row --
its state, and for worker transitions the attempt id (the fencing token) and a live lease -- with
the attempt ending and the history row written by the same statement. A move that is illegal, stale
or aimed at a missing job returns :class:`Rejected`; nothing is silently skipped and a terminal
state is never rewritten.

One part per caller, each a plain class over the one executor: :mod:`.requests`
(creation, clients, reviewers, operators), :mod:`.worker` (the lease holder),
:mod:`.maintenance` (reaper, sweeper), :mod:`.waits` (review decisions and signals,
which lose to a passed deadline; made with the requests and maintenance parts it is
given), :mod:`.operations` (external operation records). :class:`Transitions` composes
them and names each transition once, forwarded to the part that makes it.

Lock order (documented once, followed everywhere): the ``jobs`` row first, then its
``attempts``/``job_stages``/``job_checkpoints`` rows; batches lock jobs in id order.
Cancellation and publication both lock the job row, so they are serialized and exactly
one of them wins.

Callers own the transaction: pass an ``AsyncConnection`` inside ``engine.begin()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.moves import (
    Actor,
    Applied,
    Executor,
    MoveResult,
    Rejected,
    RejectReason,
    Step,
)
from atlas_jobs._app.transitions.base import (
    SYSTEM_REAPER,
    SYSTEM_SCHEDULER,
    SYSTEM_SWEEPER,
    Approver,
    KeyedRefusal,
    NewJob,
    OwnerAtCapacity,
    SameHandsRefused,
    error_doc,
)
from atlas_jobs._app.transitions.maintenance import MaintenanceMoves
from atlas_jobs._app.transitions.operations import OperationEntry, OperationMoves
from atlas_jobs._app.transitions.requests import RequestMoves, after_start_by
from atlas_jobs._app.transitions.waits import SignalOutcome, WaitMoves
from atlas_jobs._app.transitions.worker import WorkerMoves

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Part = TypeVar("_Part")


def _by(
    part: Callable[[Transitions], _Part], method: Callable[Concatenate[_Part, _P], _R]
) -> Callable[Concatenate[Transitions, _P], _R]:
    """``method`` of the part ``part`` picks, as a method of :class:`Transitions` (same
    signature and documentation)."""

    def forwarded(self: Transitions, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(part(self), *args, **kwargs)

    forwarded.__name__ = getattr(method, "__name__", "forwarded")
    forwarded.__doc__ = method.__doc__
    return forwarded


class Transitions:
    """Every named transition over one clock and lease length: the five parts, one per
    caller, and each transition forwarded to the part that makes it."""

    def __init__(self, clock: Clock, *, lease_seconds: float) -> None:
        self.executor = Executor(clock, lease_seconds)
        self.clock = clock
        self.lease_seconds = lease_seconds
        self.requests = RequestMoves(self.executor)
        self.worker = WorkerMoves(self.executor)
        self.maintenance = MaintenanceMoves(self.executor)
        self.waits = WaitMoves(self.requests, self.maintenance)
        self.operations = OperationMoves(self.executor)

    # -- requests (RequestMoves)
    create = _by(lambda t: t.requests, RequestMoves.create)
    create_many = _by(lambda t: t.requests, RequestMoves.create_many)
    create_keyed = _by(lambda t: t.requests, RequestMoves.create_keyed)
    replay = _by(lambda t: t.requests, RequestMoves.replay)
    request_cancel = _by(lambda t: t.requests, RequestMoves.request_cancel)
    reschedule = _by(lambda t: t.requests, RequestMoves.reschedule)
    approve = _by(lambda t: t.requests, RequestMoves.approve)
    reject = _by(lambda t: t.requests, RequestMoves.reject)
    review = _by(lambda t: t.requests, RequestMoves.review)
    receive_event = _by(lambda t: t.requests, RequestMoves.receive_event)
    resume = _by(lambda t: t.requests, RequestMoves.resume)
    operator_decide = _by(lambda t: t.requests, RequestMoves.operator_decide)

    # -- worker (WorkerMoves)
    claim = _by(lambda t: t.worker, WorkerMoves.claim)
    claim_to_run = _by(lambda t: t.worker, WorkerMoves.claim_to_run)
    heartbeat = _by(lambda t: t.worker, WorkerMoves.heartbeat)
    heartbeat_many = _by(lambda t: t.worker, WorkerMoves.heartbeat_many)
    set_plan = _by(lambda t: t.worker, WorkerMoves.set_plan)
    enter_stage = _by(lambda t: t.worker, WorkerMoves.enter_stage)
    record_progress = _by(lambda t: t.worker, WorkerMoves.record_progress)
    expand_plan = _by(lambda t: t.worker, WorkerMoves.expand_plan)
    stage_output = _by(lambda t: t.worker, WorkerMoves.stage_output)
    recover = _by(lambda t: t.worker, WorkerMoves.recover)
    retry_later = _by(lambda t: t.worker, WorkerMoves.retry_later)
    release = _by(lambda t: t.worker, WorkerMoves.release)
    give_up = _by(lambda t: t.worker, WorkerMoves.give_up)
    wait = _by(lambda t: t.worker, WorkerMoves.wait)
    stop_canceled = _by(lambda t: t.worker, WorkerMoves.stop_canceled)
    fail = _by(lambda t: t.worker, WorkerMoves.fail)
    lock_for_publication = _by(lambda t: t.worker, WorkerMoves.lock_for_publication)
    publish = _by(lambda t: t.worker, WorkerMoves.publish)
    publish_many = _by(lambda t: t.worker, WorkerMoves.publish_many)

    # -- maintenance (MaintenanceMoves)
    rescue = _by(lambda t: t.maintenance, MaintenanceMoves.rescue)
    rescue_locked = _by(lambda t: t.maintenance, MaintenanceMoves.rescue_locked)
    expire_result = _by(lambda t: t.maintenance, MaintenanceMoves.expire_result)
    expire_results = _by(lambda t: t.maintenance, MaintenanceMoves.expire_results)
    pass_deadline = _by(lambda t: t.maintenance, MaintenanceMoves.pass_deadline)
    pass_deadlines = _by(lambda t: t.maintenance, MaintenanceMoves.pass_deadlines)
    miss_starts = _by(lambda t: t.maintenance, MaintenanceMoves.miss_starts)

    # -- waits (WaitMoves)
    decide_review = _by(lambda t: t.waits, WaitMoves.decide_review)
    signal = _by(lambda t: t.waits, WaitMoves.signal)

    # -- operations (OperationMoves)
    record_operation = _by(lambda t: t.operations, OperationMoves.record_operation)


__all__ = [
    "SYSTEM_REAPER",
    "SYSTEM_SCHEDULER",
    "SYSTEM_SWEEPER",
    "Actor",
    "Applied",
    "Approver",
    "KeyedRefusal",
    "MoveResult",
    "NewJob",
    "OperationEntry",
    "OwnerAtCapacity",
    "RejectReason",
    "Rejected",
    "SameHandsRefused",
    "SignalOutcome",
    "Step",
    "Transitions",
    "after_start_by",
    "error_doc",
]
