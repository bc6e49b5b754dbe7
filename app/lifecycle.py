"""The job lifecycle as data: the one place that decides which moves are legal.

Everything here is what docs/protocol.md sections 1 and 2 describe. The API, the
workers, the database CHECK constraints (generated from these tables in
``atlas_jobs._app.db.schema``) and the tests all read these structures; nothing else
decides whether a state change is allowed.

Four vocabularies never mix:

* execution state (:class:`JobState`) -- where the work stands, one per job;
* progress -- per-stage ``done``/``total`` with a job-wide ``plan_revision``;
* delivery state (:class:`DeliveryState`) -- where the result stands;
* observation -- the client's own view (fresh/stale/...), never stored here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final


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

DECISION_TOO_LATE: Final = "decision_too_late"
"""History reason of a review decision (or signal) that lost to the wait's deadline:
recorded (``to`` = ``from``, the state the deadline left), changes nothing."""

OPERATION_RECORDED: Final = "operation"
"""History reason of an external operation's entry (a ``record_operation`` row)."""


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


class WaitingReason(StrEnum):
    """What holds a ``queued`` job (the status body's ``waiting_for.reason``). Not a
    state nor a reason of one: computed when the status is read, never stored."""

    NO_WORKER = "no_worker"
    CONCURRENCY = "concurrency"
    FAIR_SHARE = "fair_share"
    BACKLOG = "backlog"


WAITING_DOCS: Final = MappingProxyType(
    {
        WaitingReason.NO_WORKER: (
            "No live worker process serves the job's kind@version (none registered a "
            "heartbeat within the live window): it stays queued until one does."
        ),
        WaitingReason.CONCURRENCY: (
            "The job's concurrency key has as many jobs running as its limit allows (or "
            "no start left in its rate): it starts when one of them ends."
        ),
        WaitingReason.FAIR_SHARE: (
            "The queue is behind and other owners' lanes take their turn first (fair "
            "share): `ahead_of_you` estimates how many lanes start a job before this "
            "one's next turn."
        ),
        WaitingReason.BACKLOG: (
            "The queue is behind: older queued jobs start first; `queue_age_seconds` is "
            "how long the oldest has waited."
        ),
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
        # the contract's "running -> running" row applies to the lease holder in either state.
        (JobState.CANCEL_REQUESTED, JobState.CANCEL_REQUESTED),
        # Result expiry: delivery available -> expired; the execution state stays
        # succeeded (docs/protocol.md §2.1: expiry does not change the state).
        (JobState.SUCCEEDED, JobState.SUCCEEDED),
    }
)
"""The edge table of docs/protocol.md §2.3 as (from, to) pairs; ``None`` is "no job yet"."""


class TransitionName(StrEnum):
    """The name of every transition, as recorded in ``job_history.transition``."""

    CREATE = "create"
    CLAIM = "claim"
    HEARTBEAT = "heartbeat"
    DECLARE_PLAN = "declare_plan"
    RECORD_PROGRESS = "record_progress"
    EXPAND_PLAN = "expand_plan"
    STAGE_OUTPUT = "stage_output"
    RETRY_LATER = "retry_later"
    RELEASE = "release"
    GIVE_UP = "give_up"
    WAIT = "wait"
    REQUEST_CANCEL = "request_cancel"
    STOP_CANCELED = "stop_canceled"
    PUBLISH = "publish"
    FAIL = "fail"
    EXPIRE_RESULT = "expire_result"
    RESCUE = "rescue"
    RESCUE_EXHAUSTED = "rescue_exhausted"
    APPROVE = "approve"
    RECEIVE_EVENT = "receive_event"
    REJECT = "reject"
    DEADLINE_FAIL = "deadline_fail"
    DEADLINE_ESCALATE = "deadline_escalate"
    RESUME = "resume"
    OPERATOR_CANCEL = "operator_cancel"
    OPERATOR_FAIL = "operator_fail"
    REPLAY = "replay"
    RECORD_OPERATION = "record_operation"


class Guard(StrEnum):
    """A precondition beyond the source state, checked in the same compare-and-set."""

    AWAITING_REVIEW = "awaiting_review"
    """The job waits with reason ``review`` and its deadline has not passed (only a
    review decides it; once the deadline passed, the deadline's rule wins)."""
    AWAITING_EVENT = "awaiting_event"
    """The job waits with reason ``external`` and its deadline has not passed (only the
    awaited event resumes it)."""
    LEASE_EXPIRED = "lease_expired"
    """The holder's lease ran out (the reaper's moves)."""
    DEADLINE_RULE_FAIL = "deadline_rule_fail"
    """The wait's deadline passed and its rule is ``fail``."""
    DEADLINE_RULE_ESCALATE = "deadline_rule_escalate"
    """The wait's deadline passed and its rule is ``escalate``."""


class Effect(StrEnum):
    """A column a transition sets besides the bookkeeping every move gets from its
    source and target (reason, ``finished_at``, lease, wait, blocked outputs, version).

    Where a value comes from the caller, it is the named field of the move's step."""

    AVAILABLE_NOW = "available_now"
    """``available_at = now``: claimable at once."""
    AVAILABLE_AFTER = "available_after"
    """``available_at = now + seconds`` (the retry backoff)."""
    LAST_ERROR = "last_error"
    """``last_error = error`` (recoverable: the job goes on)."""
    ERROR = "error"
    """``error = error`` (the job's final error)."""
    WAIT_DEADLINE = "wait_deadline"
    """``wait_deadline_at = now + seconds``, ``wait_on_deadline = rule``."""
    UNCHARGE = "uncharge"
    """The ended attempt is not charged against the attempt budget."""
    NEW_BUDGET = "new_budget"
    """A fresh attempt and elapsed-time budget from now."""
    RESULT = "result"
    """``result_ref = result_ref``, retained until ``now + seconds``."""
    CANCEL_MARK = "cancel_mark"
    """``cancel = {requested_at, requested_by}``."""
    STAGE = "stage"
    """``current_stage = stage``."""
    PLAN_DECLARED = "plan_declared"
    """``plan_revision`` is at least 1 (a plan exists)."""
    PLAN_REVISED = "plan_revised"
    """``plan_revision`` increments; ``current_stage = stage``."""
    EXTEND_LEASE = "extend_lease"
    """The lease runs until ``now + lease`` (job and attempt rows)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """A named move, declared as data; :mod:`atlas_jobs._app.db.moves` is its one executor.

    * ``moves`` -- each source state and where it goes;
    * ``reasons`` -- the reason a target gets unless the caller names another one of
      :data:`STATE_REASONS` (moves that keep the state keep the reason);
    * ``fenced`` -- made by a worker: matches only while the caller's attempt id is the
      job's current attempt with a live lease (the fencing token);
    * ``guard`` -- a further precondition (review wait, expired lease, passed deadline);
    * ``ends_attempt`` -- the outcome written on the attempt that held the job;
    * ``delivery`` -- the delivery states the move may set (each along
      :data:`DELIVERY_MOVES`); ``delivery_may_stay`` -- staying put is fine too;
    * ``effects`` -- further columns (see :class:`Effect`);
    * ``visible`` -- bumps ``version`` (ETag) and ``updated_at``; ``records`` -- appends
      a history row; ``skip_locked`` -- a batch passes over rows another transaction
      holds instead of waiting (heartbeats never queue behind a publication);
    * ``actors`` -- who may make it: workers their fenced moves, the system its
      maintenance, operators their decisions, reviewers (and operators) reviews.

    Every move also gets, from its source and target alone: ``finished_at`` on entering
    a terminal state, the lease cleared on leaving ``running``/``cancel_requested``, the
    wait cleared on leaving ``waiting``, private outputs ``blocked`` on entering
    ``failed``/``canceled``.
    """

    name: TransitionName
    moves: MappingProxyType[JobState | None, JobState]
    doc: str
    reasons: MappingProxyType[JobState, Reason] = field(
        default_factory=lambda: MappingProxyType({})
    )
    fenced: bool = False
    guard: Guard | None = None
    ends_attempt: AttemptOutcome | None = None
    delivery: frozenset[DeliveryState] = frozenset()
    delivery_may_stay: bool = False
    effects: frozenset[Effect] = frozenset()
    visible: bool = True
    records: bool = True
    skip_locked: bool = False
    actors: frozenset[str] = frozenset()
    """Which kinds of actor may make the move (empty: any). Roles are checked at the
    edge (403); this is the lifecycle's own statement of who moves a job where."""

    @property
    def sources(self) -> frozenset[JobState]:
        return frozenset(s for s in self.moves if s is not None)

    @property
    def changes_state(self) -> bool:
        return any(source != target for source, target in self.moves.items())

    def target(self, source: JobState | None) -> JobState | None:
        return self.moves.get(source)

    def reason_for(self, target: JobState, chosen: Reason | None = None) -> Reason:
        """The reason recorded with ``target``: the caller's (when the target allows it)
        or the declared one."""
        if chosen is not None:
            if chosen not in STATE_REASONS[target]:
                raise ValueError(f"{self.name}: reason {chosen} does not go with {target}")
            return chosen
        return self.reasons.get(target) or DEFAULT_REASONS[target]

    def delivery_allows(self, current: DeliveryState, wanted: DeliveryState) -> bool:
        """Whether this move may take delivery from ``current`` to ``wanted``."""
        if wanted not in self.delivery:
            return False
        if current == wanted:
            return self.delivery_may_stay
        return (current, wanted) in DELIVERY_MOVES


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

DEFAULT_REASONS: Final = MappingProxyType(
    {
        JobState.QUEUED: Reason.NEW,
        JobState.RUNNING: Reason.CLAIMED,
        JobState.WAITING: Reason.REVIEW,
        JobState.UNRESOLVED: Reason.RETRIES_EXHAUSTED,
        JobState.CANCEL_REQUESTED: Reason.CANCEL_REQUESTED,
        JobState.SUCCEEDED: Reason.PUBLISHED,
        JobState.FAILED: Reason.ERROR,
        JobState.CANCELED: Reason.CANCELED,
    }
)
"""The reason a state gets when neither the transition nor its caller names one."""

_Q, _R, _W, _U = JobState.QUEUED, JobState.RUNNING, JobState.WAITING, JobState.UNRESOLVED
_CR, _S, _F, _C = (
    JobState.CANCEL_REQUESTED,
    JobState.SUCCEEDED,
    JobState.FAILED,
    JobState.CANCELED,
)
_N = TransitionName
_O = AttemptOutcome
_E = Effect
_BOOKKEEPING: dict[JobState | None, JobState] = {_R: _R, _CR: _CR}
_WORKER, _SYSTEM, _OPERATOR, _REVIEWER, _CLIENT = (
    "worker",
    "system",
    "operator",
    "reviewer",
    "client",
)
"""The lease holder's writes that keep the state (docs/protocol.md §2.3: running -> running)."""


def _t(
    name: TransitionName,
    moves: dict[JobState | None, JobState],
    doc: str,
    *,
    reasons: dict[JobState, Reason] | None = None,
    effects: tuple[Effect, ...] = (),
    delivery: tuple[DeliveryState, ...] = (),
    actors: tuple[str, ...] = (),
    **flags: Any,
) -> Transition:
    if flags.get("fenced"):
        actors = actors or (_WORKER,)
    return Transition(
        name,
        MappingProxyType(moves),
        doc,
        reasons=MappingProxyType(reasons or {}),
        effects=frozenset(effects),
        delivery=frozenset(delivery),
        actors=frozenset(actors),
        **flags,
    )


TRANSITIONS: Final = MappingProxyType(
    {
        t.name: t
        for t in (
            _t(
                _N.CREATE,
                {None: _Q},
                "POST /v1/jobs accepted and committed.",
                actors=(_CLIENT, _OPERATOR, _SYSTEM),
            ),
            _t(
                _N.CLAIM,
                {_Q: _R},
                "A worker claims the job and opens a new attempt.",
                effects=(_E.EXTEND_LEASE,),
                actors=(_WORKER,),
            ),
            _t(
                _N.HEARTBEAT,
                _BOOKKEEPING,
                "The lease holder extends its lease.",
                fenced=True,
                effects=(_E.EXTEND_LEASE,),
                visible=False,
                records=False,
                skip_locked=True,
            ),
            _t(
                _N.DECLARE_PLAN,
                _BOOKKEEPING,
                "The job's stages are declared (plan revision 1), once per job.",
                fenced=True,
                effects=(_E.PLAN_DECLARED,),
                records=False,
            ),
            _t(
                _N.RECORD_PROGRESS,
                _BOOKKEEPING,
                "A stage is entered or a unit of it is done.",
                fenced=True,
                effects=(_E.STAGE,),
                records=False,
            ),
            _t(
                _N.EXPAND_PLAN,
                _BOOKKEEPING,
                "A stage found more units: total grows, plan_revision increments.",
                fenced=True,
                effects=(_E.PLAN_REVISED,),
            ),
            _t(
                _N.STAGE_OUTPUT,
                _BOOKKEEPING,
                "Private outputs changed (never published by this move).",
                fenced=True,
                delivery=(DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE),
                delivery_may_stay=True,
                records=False,
            ),
            _t(
                _N.RETRY_LATER,
                {_R: _Q},
                "Recoverable error with budget left.",
                reasons={_Q: Reason.RETRY},
                fenced=True,
                ends_attempt=_O.RETRY,
                effects=(_E.AVAILABLE_AFTER, _E.LAST_ERROR),
            ),
            _t(
                _N.RELEASE,
                {_R: _Q},
                "Graceful shutdown hands the job back; the attempt is not charged.",
                reasons={_Q: Reason.RETRY},
                fenced=True,
                ends_attempt=_O.RELEASED,
                effects=(_E.AVAILABLE_NOW, _E.UNCHARGE),
            ),
            _t(
                _N.GIVE_UP,
                {_R: _U},
                "Recoverable error with budget spent.",
                fenced=True,
                ends_attempt=_O.UNRESOLVED,
                effects=(_E.LAST_ERROR,),
            ),
            _t(
                _N.WAIT,
                {_R: _W},
                "The job reaches a review gate or external wait; the attempt is not charged.",
                fenced=True,
                ends_attempt=_O.WAITING,
                effects=(_E.WAIT_DEADLINE, _E.UNCHARGE),
            ),
            _t(
                _N.REQUEST_CANCEL,
                {_Q: _C, _W: _C, _R: _CR},
                "Owner or operator asks to cancel.",
                effects=(_E.CANCEL_MARK,),
                actors=(_CLIENT, _OPERATOR),
            ),
            _t(
                _N.STOP_CANCELED,
                {_CR: _C},
                "The worker stopped at a safe point.",
                fenced=True,
                ends_attempt=_O.CANCELED,
            ),
            _t(
                _N.PUBLISH,
                {_R: _S, _CR: _S},
                "The publication transaction commits.",
                fenced=True,
                ends_attempt=_O.SUCCEEDED,
                delivery=(DeliveryState.AVAILABLE,),
                effects=(_E.RESULT,),
            ),
            _t(
                _N.FAIL,
                {_R: _F, _CR: _F},
                "A permanent error in the worker.",
                fenced=True,
                ends_attempt=_O.FAILED,
                effects=(_E.ERROR,),
            ),
            _t(
                _N.EXPIRE_RESULT,
                {_S: _S},
                "Retention passed; delivery becomes expired.",
                delivery=(DeliveryState.EXPIRED,),
                actors=(_SYSTEM,),
            ),
            _t(
                _N.RESCUE,
                {_R: _Q, _CR: _C},
                "The lease expired; the reaper takes the job back.",
                reasons={_Q: Reason.RETRY},
                guard=Guard.LEASE_EXPIRED,
                ends_attempt=_O.LOST,
                effects=(_E.AVAILABLE_AFTER, _E.LAST_ERROR),
                actors=(_SYSTEM,),
            ),
            _t(
                _N.RESCUE_EXHAUSTED,
                {_R: _U},
                "The lease expired and the budget is spent.",
                reasons={_U: Reason.LEASE_LOST},
                guard=Guard.LEASE_EXPIRED,
                ends_attempt=_O.LOST,
                effects=(_E.LAST_ERROR,),
                actors=(_SYSTEM,),
            ),
            _t(
                _N.APPROVE,
                {_W: _Q},
                "A reviewer approved the job.",
                reasons={_Q: Reason.REVIEW_APPROVED},
                guard=Guard.AWAITING_REVIEW,
                effects=(_E.AVAILABLE_NOW,),
                actors=(_REVIEWER, _OPERATOR),
            ),
            _t(
                _N.RECEIVE_EVENT,
                {_W: _Q},
                "The awaited external event arrived.",
                reasons={_Q: Reason.EVENT_RECEIVED},
                guard=Guard.AWAITING_EVENT,
                effects=(_E.AVAILABLE_NOW,),
                actors=(_SYSTEM, _CLIENT, _OPERATOR),
            ),
            _t(
                _N.REJECT,
                {_W: _F},
                "A reviewer rejected the job.",
                reasons={_F: Reason.REVIEW_REJECTED},
                guard=Guard.AWAITING_REVIEW,
                effects=(_E.ERROR,),
                actors=(_REVIEWER, _OPERATOR),
            ),
            _t(
                _N.DEADLINE_FAIL,
                {_W: _F},
                "The wait deadline passed; the rule says fail.",
                reasons={_F: Reason.DEADLINE_PASSED},
                guard=Guard.DEADLINE_RULE_FAIL,
                effects=(_E.ERROR,),
                actors=(_SYSTEM,),
            ),
            _t(
                _N.DEADLINE_ESCALATE,
                {_W: _U},
                "The wait deadline passed; the rule says escalate.",
                reasons={_U: Reason.DEADLINE_ESCALATED},
                guard=Guard.DEADLINE_RULE_ESCALATE,
                effects=(_E.LAST_ERROR,),
                actors=(_SYSTEM,),
            ),
            _t(
                _N.RESUME,
                {_U: _Q},
                "An operator resumes with a new attempt budget.",
                reasons={_Q: Reason.RESUMED},
                effects=(_E.AVAILABLE_NOW, _E.NEW_BUDGET),
                actors=(_OPERATOR,),
            ),
            _t(
                _N.OPERATOR_CANCEL,
                {_U: _C},
                "An operator cancels unresolved work.",
                actors=(_OPERATOR,),
            ),
            _t(
                _N.OPERATOR_FAIL,
                {_U: _F},
                "An operator fails unresolved work.",
                reasons={_F: Reason.OPERATOR},
                effects=(_E.ERROR,),
                actors=(_OPERATOR,),
            ),
            _t(
                _N.REPLAY,
                {None: _Q},
                "An operator re-runs a terminal job as a new job.",
                actors=(_OPERATOR,),
            ),
            _t(
                _N.RECORD_OPERATION,
                _BOOKKEEPING,
                "An external operation was attempted, confirmed, found uncertain, "
                "reconciled or adopted (its entry: operation id, outcome, HTTP status).",
                fenced=True,
            ),
        )
    }
)
"""Every named transition. ``replay`` creates a new job; it never rewrites the old one."""


def transition(name: str) -> Transition:
    """Look up a named transition; unknown names are a programming error."""
    return TRANSITIONS[TransitionName(name)]


def budget_verdict(
    *,
    charged_attempts: int,
    max_attempts: int,
    elapsed_seconds: float,
    max_elapsed_seconds: float,
    delay_seconds: float = 0.0,
) -> Reason | None:
    """The one retry budget rule: ``None`` while another attempt may run, else why not.

    ``charged_attempts`` counts the attempt that just ended; ``elapsed_seconds`` is
    database time since the budget started (creation or ``resume``). Give up when no
    attempt is left, or when the next attempt could not even start (after
    ``delay_seconds`` of backoff) before the elapsed-time budget runs out. Used by the
    worker after a recoverable error and by the reaper after a lost lease (which names
    the first case ``lease_lost``)."""
    if charged_attempts >= max_attempts:
        return Reason.RETRIES_EXHAUSTED
    if elapsed_seconds + delay_seconds >= max_elapsed_seconds:
        return Reason.TIME_EXHAUSTED
    return None


def is_terminal(state: JobState) -> bool:
    return state in TERMINAL_STATES


ALL_STATES: Final = tuple(JobState)
ALL_DELIVERY_STATES: Final = tuple(DeliveryState)
ALL_REASONS: Final = tuple(Reason)
