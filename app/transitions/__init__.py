"""The transition service: every state change of every job goes through here.

Each named transition of :data:`atlas_jobs._app.lifecycle.TRANSITIONS` is declared as data there and
applied by the one executor, :mod:`atlas_jobs._app.db.moves`: a compare-and-set on the job row --
its state, and for worker transitions the attempt id (the fencing token) and a live lease -- with
the attempt ending and the history row written by the same statement. A move that is illegal, stale
or aimed at a missing job returns :class:`Rejected`; nothing is silently skipped and a terminal
state is never rewritten.

Split by who calls it: :mod:`.requests` (creation, clients, reviewers, operators),
:mod:`.worker` (the lease holder), :mod:`.maintenance` (reaper, sweeper), :mod:`.waits`
(review decisions and signals, which lose to a passed deadline), :mod:`.operations`
(external operation records).

Lock order (documented once, followed everywhere): the ``jobs`` row first, then its
``attempts``/``job_stages``/``job_checkpoints`` rows; batches lock jobs in id order.
Cancellation and publication both lock the job row, so they are serialized and exactly
one of them wins.

Callers own the transaction: pass an ``AsyncConnection`` inside ``engine.begin()``.
"""

from __future__ import annotations

from atlas_jobs._app.db.moves import Actor, Applied, MoveResult, Rejected, RejectReason, Step
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
from atlas_jobs._app.transitions.operations import OperationEntry, OperationMoves
from atlas_jobs._app.transitions.requests import after_start_by
from atlas_jobs._app.transitions.waits import SignalOutcome, WaitMoves
from atlas_jobs._app.transitions.worker import WorkerMoves


class Transitions(WaitMoves, WorkerMoves, OperationMoves):
    """Every named transition over one clock and lease length."""


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
