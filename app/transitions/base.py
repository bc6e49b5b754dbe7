"""What every part of the transition service shares: the executor, the job a new row
describes, the error document."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.moves import Actor, Executor
from atlas_jobs._app.lifecycle import ActorKind

SYSTEM_REAPER = Actor(ActorKind.SYSTEM, "reaper")
SYSTEM_SWEEPER = Actor(ActorKind.SYSTEM, "sweeper")
SYSTEM_SCHEDULER = Actor(ActorKind.SYSTEM, "scheduler")


class NewJob(NamedTuple):
    """A job to create: what its creator decides. Immutable; a named tuple rather than a
    frozen dataclass because a batch of them is made and read per created job: one is
    built in a fifth of the time, and a batch turns into the creation statement's arrays
    in one transposition (``zip(*batch)``)."""

    owner: str
    kind: str
    kind_version: int
    input: Mapping[str, Any]
    max_attempts: int
    max_elapsed_seconds: int
    request_id: str | None = None
    idempotency_key: str | None = None
    replay_of: uuid.UUID | None = None
    trigger: Mapping[str, Any] | None = None
    """What started the job besides a request (a schedule and its tick), recorded in
    the creation's history ``data``."""
    priority: int | None = None
    """``None``: the default (atlas_jobs._app.fairness.DEFAULT_PRIORITY)."""
    concurrency_key: str | None = None
    """The stored concurrency key (atlas_jobs._app.fairness.job_key), ``None`` for none."""
    concurrency_limit: int | None = None
    """The limit the job's kind declared for its key."""
    concurrency_rate: int | None = None
    """The start rate the job's kind declared for its key: starts per
    ``concurrency_period_seconds`` (both ``None``: none)."""
    concurrency_period_seconds: float | None = None
    tags: tuple[str, ...] = ()
    """The job's ``key=value`` tags (atlas_jobs._app.tags), sorted."""
    traceparent: str | None = None
    """The creating request's W3C trace context when tracing is on (``atlas_jobs._app.tracing``),
    recorded in the creation's history ``data``: each attempt's span continues it."""
    run_at: datetime | None = None
    """Not before this moment (one in the past: now)."""
    run_after: float | None = None
    """Not before this many seconds after the creation (instead of ``run_at``)."""
    start_by: datetime | None = None
    """Never started after this moment: then it fails (``start_deadline_passed``)."""
    start_within: float | None = None
    """The start deadline as seconds after the creation (instead of ``start_by``)."""


class OwnerAtCapacity(Exception):  # noqa: N818 - a refusal, not a failure
    """Creation refused by the per-owner admission cap: nothing was created."""

    def __init__(self, unfinished: int) -> None:
        super().__init__(f"{unfinished} unfinished jobs")
        self.unfinished = unfinished


class SameHandsRefused(Exception):  # noqa: N818 - a refusal, not a failure
    """Four-eyes: an approval by the holder (or the very key) that submitted the job, or
    by a key that names no holder (``holder_required``)."""

    def __init__(self, holder: str | None, *, holder_required: bool = False) -> None:
        super().__init__(holder or "the submitting key")
        self.holder = holder
        self.holder_required = holder_required


@dataclass(frozen=True, slots=True)
class Approver:
    """Who approves, for the four-eyes rule: the key, and its holder when named."""

    key_id: uuid.UUID
    holder: str | None

    def submitted(self, submitter: Any) -> bool:
        """Whether these are the hands that submitted (``reads.Submitter``): the same
        key, or another key of the same holder (names compared case-insensitively)."""
        if submitter.key_id == self.key_id:
            return True
        return (
            submitter.holder is not None
            and self.holder is not None
            and submitter.holder.casefold() == self.holder.casefold()
        )


class KeyedRefusal(enum.Enum):
    """Why a keyed creation (``create_keyed``) created nothing, besides the cap."""

    IN_FLIGHT = "in_flight"
    """Another request holds the key's in-flight lock (docs/protocol.md §4: 409)."""
    STORED = "stored"
    """The key is already stored: its job is the answer (or 422 for another body)."""


def error_doc(code: str, message: str, *, retryable: bool, **extra: Any) -> dict[str, Any]:
    """The error object of the status body: ``{code, message, retryable}``."""
    return {"code": code, "message": message, "retryable": retryable, **extra}


class Service:
    """One caller's named transitions, made by the one executor. Callers own the
    transaction: pass an ``AsyncConnection`` inside ``engine.begin()``."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.clock: Clock = executor.clock
        self.lease_seconds: float = executor.lease_seconds
