"""The job lifecycle as data: the one place that decides which moves are legal.

Everything here mirrors ``SPEC.md`` section 1. The API, the workers, the database
CHECK constraints (generated from these tables in ``app.db.schema``) and the tests all
read these structures; nothing else decides whether a state change is allowed.

Four vocabularies never mix:

* execution state (:class:`JobState`) -- where the work stands, one per job;
* progress -- per-stage ``done``/``total`` with a job-wide ``plan_revision``;
* delivery state (:class:`DeliveryState`) -- where the result stands;
* observation -- the client's own view (fresh/stale/...), never stored here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final


class JobState(StrEnum):
    """Execution state of a job. Owned by the server; one value per job."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    UNRESOLVED = "unresolved"
    CANCEL_REQUESTED = "cancel_requested"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


STATE_DOCS: Final = MappingProxyType(
    {
        JobState.QUEUED: "Accepted and durable; no worker holds it.",
        JobState.RUNNING: "Exactly one worker holds a live lease and is doing the work.",
        JobState.WAITING: "A legitimate business wait (review or external); no worker holds it.",
        JobState.UNRESOLVED: "Automation gave up without a known outcome; an operator decides.",
        JobState.CANCEL_REQUESTED: "Cancellation is recorded; work stops at its next safe point.",
        JobState.SUCCEEDED: "Terminal: the result was published and an owner reference exists.",
        JobState.FAILED: "Terminal: a permanent error or an operator's decision.",
        JobState.CANCELED: "Terminal: the job was canceled before it published.",
    }
)

TERMINAL_STATES: Final = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED})
ACTIVE_STATES: Final = frozenset({JobState.RUNNING, JobState.CANCEL_REQUESTED})
"""States in which a worker holds a lease (the attempt id is the fencing token)."""


class Reason(StrEnum):
    """Why a job is in its state. Which reasons go with which state: :data:`STATE_REASONS`."""

    NEW = "new"
    RETRY = "retry"
    RESUMED = "resumed"
    REVIEW_APPROVED = "review_approved"
    EVENT_RECEIVED = "event_received"
    CLAIMED = "claimed"
    REVIEW = "review"
    EXTERNAL = "external"
    RETRIES_EXHAUSTED = "retries_exhausted"
    TIME_EXHAUSTED = "time_exhausted"
    LEASE_LOST = "lease_lost"
    UNRECONCILED = "unreconciled"
    DEADLINE_ESCALATED = "deadline_escalated"
    CANCEL_REQUESTED = "cancel_requested"
    PUBLISHED = "published"
    ERROR = "error"
    REVIEW_REJECTED = "review_rejected"
    DEADLINE_PASSED = "deadline_passed"
    OPERATOR = "operator"
    CANCELED = "canceled"


STATE_REASONS: Final = MappingProxyType(
    {
        JobState.QUEUED: frozenset(
            {
                Reason.NEW,
                Reason.RETRY,
                Reason.RESUMED,
                Reason.REVIEW_APPROVED,
                Reason.EVENT_RECEIVED,
            }
        ),
        JobState.RUNNING: frozenset({Reason.CLAIMED}),
        JobState.WAITING: frozenset({Reason.REVIEW, Reason.EXTERNAL}),
        JobState.UNRESOLVED: frozenset(
            {
                Reason.RETRIES_EXHAUSTED,
                Reason.TIME_EXHAUSTED,
                Reason.LEASE_LOST,
                Reason.UNRECONCILED,
                Reason.DEADLINE_ESCALATED,
            }
        ),
        JobState.CANCEL_REQUESTED: frozenset({Reason.CANCEL_REQUESTED}),
        JobState.SUCCEEDED: frozenset({Reason.PUBLISHED}),
        JobState.FAILED: frozenset(
            {Reason.ERROR, Reason.REVIEW_REJECTED, Reason.DEADLINE_PASSED, Reason.OPERATOR}
        ),
        JobState.CANCELED: frozenset({Reason.CANCELED}),
    }
)


CANCEL_TOO_LATE: Final = "cancel_too_late"
"""History reason of a cancel that found the job terminal: recorded, changes nothing."""


class DeliveryState(StrEnum):
    """Where the result stands. Partial and staged files are never downloadable."""

    NONE = "none"
    PARTIAL_PRIVATE = "partial_private"
    STAGED_PRIVATE = "staged_private"
    AVAILABLE = "available"
    BLOCKED = "blocked"
    EXPIRED = "expired"


DELIVERY_DOCS: Final = MappingProxyType(
    {
        DeliveryState.NONE: "No output exists yet.",
        DeliveryState.PARTIAL_PRIVATE: "Some units exist in private staging; not downloadable.",
        DeliveryState.STAGED_PRIVATE: "The package is complete in private staging; still private.",
        DeliveryState.AVAILABLE: "Published: an owner-accessible reference exists.",
        DeliveryState.BLOCKED: "Private outputs exist but will never be published.",
        DeliveryState.EXPIRED: "Retention passed and the files were removed; state is unchanged.",
    }
)

DELIVERY_MOVES: Final = frozenset(
    {
        (DeliveryState.NONE, DeliveryState.PARTIAL_PRIVATE),
        (DeliveryState.NONE, DeliveryState.STAGED_PRIVATE),
        (DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE),
        (DeliveryState.STAGED_PRIVATE, DeliveryState.AVAILABLE),
        # A result without files (e.g. ``atlas.noop``) has nothing to stage: its
        # publication makes the (empty) reference available directly.
        (DeliveryState.NONE, DeliveryState.AVAILABLE),
        (DeliveryState.AVAILABLE, DeliveryState.EXPIRED),
        (DeliveryState.PARTIAL_PRIVATE, DeliveryState.BLOCKED),
        (DeliveryState.STAGED_PRIVATE, DeliveryState.BLOCKED),
    }
)
"""The only allowed delivery moves (staying in place is always allowed)."""


EDGES: Final = frozenset(
    {
        (None, JobState.QUEUED),
        (JobState.QUEUED, JobState.RUNNING),
        (JobState.QUEUED, JobState.CANCELED),
        (JobState.WAITING, JobState.CANCELED),
        (JobState.RUNNING, JobState.RUNNING),
        (JobState.RUNNING, JobState.WAITING),
        (JobState.RUNNING, JobState.QUEUED),
        (JobState.RUNNING, JobState.UNRESOLVED),
        (JobState.RUNNING, JobState.SUCCEEDED),
        (JobState.RUNNING, JobState.FAILED),
        (JobState.RUNNING, JobState.CANCEL_REQUESTED),
        (JobState.WAITING, JobState.QUEUED),
        (JobState.WAITING, JobState.FAILED),
        (JobState.WAITING, JobState.UNRESOLVED),
        (JobState.UNRESOLVED, JobState.QUEUED),
        (JobState.UNRESOLVED, JobState.CANCELED),
        (JobState.UNRESOLVED, JobState.FAILED),
        (JobState.CANCEL_REQUESTED, JobState.CANCELED),
        (JobState.CANCEL_REQUESTED, JobState.SUCCEEDED),
        (JobState.CANCEL_REQUESTED, JobState.FAILED),
        # Worker bookkeeping while cancellation is pending (heartbeat, progress, staging):
        # the SPEC's "running -> running" row applies to the lease holder in either state.
        (JobState.CANCEL_REQUESTED, JobState.CANCEL_REQUESTED),
        # Result expiry: delivery available -> expired; the execution state stays
        # succeeded (SPEC: "Expiry of the result later does not change this state").
        (JobState.SUCCEEDED, JobState.SUCCEEDED),
    }
)
"""The transition table of SPEC section 1 as (from, to) pairs; ``None`` is "no job yet"."""


@dataclass(frozen=True, slots=True)
class Transition:
    """A named move: which states it applies to and where each one goes.

    ``fenced`` transitions are made by a worker and only match while the caller's
    attempt id is the job's current attempt (the fencing token).
    """

    name: str
    moves: MappingProxyType[JobState | None, JobState]
    doc: str
    fenced: bool = False

    @property
    def sources(self) -> frozenset[JobState]:
        return frozenset(s for s in self.moves if s is not None)

    def target(self, source: JobState | None) -> JobState | None:
        return self.moves.get(source)


def _t(
    name: str, moves: dict[JobState | None, JobState], doc: str, *, fenced: bool = False
) -> Transition:
    return Transition(name, MappingProxyType(moves), doc, fenced)


_Q, _R, _W, _U = JobState.QUEUED, JobState.RUNNING, JobState.WAITING, JobState.UNRESOLVED
_CR, _S, _F, _C = (
    JobState.CANCEL_REQUESTED,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELED,
)

TRANSITIONS: Final = MappingProxyType(
    {
        t.name: t
        for t in (
            _t("create", {None: _Q}, "POST /v1/jobs accepted and committed."),
            _t("claim", {_Q: _R}, "A worker claims the job and opens a new attempt."),
            _t("heartbeat", {_R: _R, _CR: _CR}, "The lease holder extends its lease.", fenced=True),
            _t("record_progress", {_R: _R, _CR: _CR}, "Units done in a stage.", fenced=True),
            _t("expand_plan", {_R: _R, _CR: _CR}, "A stage found more units.", fenced=True),
            _t("stage_output", {_R: _R, _CR: _CR}, "Private outputs changed.", fenced=True),
            _t("retry_later", {_R: _Q}, "Recoverable error with budget left.", fenced=True),
            _t("release", {_R: _Q}, "Graceful shutdown hands the job back.", fenced=True),
            _t("give_up", {_R: _U}, "Recoverable error with budget spent.", fenced=True),
            _t("wait", {_R: _W}, "The job reaches a review gate or external wait.", fenced=True),
            _t("request_cancel", {_Q: _C, _W: _C, _R: _CR}, "Owner or operator asks to cancel."),
            _t("stop_canceled", {_CR: _C}, "The worker stopped at a safe point.", fenced=True),
            _t("publish", {_R: _S, _CR: _S}, "The publication transaction commits.", fenced=True),
            _t("fail", {_R: _F, _CR: _F}, "A permanent error in the worker.", fenced=True),
            _t("expire_result", {_S: _S}, "Retention passed; delivery becomes expired."),
            _t("rescue", {_R: _Q, _CR: _C}, "The lease expired; the reaper takes the job back."),
            _t("rescue_exhausted", {_R: _U}, "The lease expired and the budget is spent."),
            _t("approve", {_W: _Q}, "A reviewer approved the job."),
            _t("receive_event", {_W: _Q}, "The awaited external event arrived."),
            _t("reject", {_W: _F}, "A reviewer rejected the job."),
            _t("deadline_fail", {_W: _F}, "The wait deadline passed; the rule says fail."),
            _t("deadline_escalate", {_W: _U}, "The wait deadline passed; the rule says escalate."),
            _t("resume", {_U: _Q}, "An operator resumes with a new attempt budget."),
            _t("operator_cancel", {_U: _C}, "An operator cancels unresolved work."),
            _t("operator_fail", {_U: _F}, "An operator fails unresolved work."),
            _t("replay", {None: _Q}, "An operator re-runs a terminal job as a new job."),
        )
    }
)
"""Every named transition. ``replay`` creates a new job; it never rewrites the old one."""


def transition(name: str) -> Transition:
    """Look up a named transition; unknown names are a programming error."""
    return TRANSITIONS[name]


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_STATES


ALL_STATES: Final = tuple(JobState)
ALL_DELIVERY_STATES: Final = tuple(DeliveryState)
ALL_REASONS: Final = tuple(Reason)


class AttemptOutcome(StrEnum):
    """How one attempt (one claim, one fencing token) ended."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRY = "retry"
    RELEASED = "released"
    UNRESOLVED = "unresolved"
    WAITING = "waiting"
    CANCELED = "canceled"
    LOST = "lost"


ALL_ATTEMPT_OUTCOMES: Final = tuple(AttemptOutcome)
