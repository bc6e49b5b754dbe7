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
    START_DEADLINE_PASSED = "start_deadline_passed"
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
            {
                Reason.ERROR,
                Reason.REVIEW_REJECTED,
                Reason.DEADLINE_PASSED,
                Reason.START_DEADLINE_PASSED,
                Reason.OPERATOR,
            }
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

    SCHEDULED = "scheduled"
    START_DEADLINE_PASSED = "start_deadline_passed"
    NO_WORKER = "no_worker"
    PAUSED = "paused"
    CONCURRENCY = "concurrency"
    RATE = "rate"
    FAIR_SHARE = "fair_share"
    BACKLOG = "backlog"


WAITING_DOCS: Final = MappingProxyType(
    {
        WaitingReason.SCHEDULED: (
            "The job was created (or rescheduled) to run at ``run_at``, which is still "
            "ahead: no worker claims it before then."
        ),
        WaitingReason.START_DEADLINE_PASSED: (
            "No worker claimed the job by its ``start_by``: it will never start, and the "
            "next maintenance pass ends it (``failed``, reason ``start_deadline_passed``)."
        ),
        WaitingReason.NO_WORKER: (
            "No live worker process serves the job's kind@version (none registered a "
            "heartbeat within the live window): it stays queued until one does."
        ),
        WaitingReason.CONCURRENCY: (
            "The job's concurrency key has as many jobs running as its limit allows: it "
            "starts when one of them ends."
        ),
        WaitingReason.RATE: (
            "The job's concurrency key has no start left in its start rate (`starts` per "
            "`per_seconds`): the next start is allowed at `next_start_at`."
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
        WaitingReason.PAUSED: (
            "An operator paused the job's kind (every version, or this one): no worker "
            "claims it until the kind is resumed; attempts already running finish."
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
        # The owner moves or drops a queued job's delay (``reschedule``).
        (JobState.QUEUED, JobState.QUEUED),
        # No worker claimed the job by its start deadline (``miss_start``).
        (JobState.QUEUED, JobState.FAILED),
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
    RESCHEDULE = "reschedule"
    MISS_START = "miss_start"


class ActorKind(StrEnum):
    """Who makes a move (the first part of a history row's ``actor``, ``client:alice``)."""

    CLIENT = "client"
    """The job's owner, through the API."""
    OPERATOR = "operator"
    """Someone with the operator role: decisions about any owner's jobs."""
    REVIEWER = "reviewer"
    """Someone with the reviewer role: review decisions."""
    WORKER = "worker"
    """A worker process, for the attempt it holds."""
    SYSTEM = "system"
    """The service's own maintenance (reaper, sweeper, scheduler)."""


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
    START_OPEN = "start_open"
    """The job may still start: it has no start deadline, has started before, or its
    ``start_by`` is ahead -- and the step's new ``run_at`` is not after ``start_by``."""
    START_MISSED = "start_missed"
    """The job never started and its ``start_by`` has passed."""


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
    RUN_AT = "run_at"
    """``run_at = at`` (``NULL``: no delay), claimable from ``greatest(now, at)``; a job
    that never started gets its elapsed-time budget from then on."""
    OPEN_ATTEMPT = "open_attempt"
    """A new attempt: its id (the fencing token), its number, charged against the
    budget, held by the claiming worker (``:worker_id``), and its ``attempts`` row."""


@dataclass(frozen=True, slots=True)
class HandOver:
    """Where a transition hands a step over (:attr:`Transition.hands_over`): the
    transition that makes it instead, and the history note it gets when the caller gave
    none."""

    transition: TransitionName
    note: str | None = None


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
      maintenance, operators their decisions, reviewers (and operators) reviews;
    * ``settled`` -- states that mean the move already took effect (a repeat);
    * ``hands_over`` -- states in which the step is made as another transition.

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
    actors: frozenset[ActorKind] = frozenset()
    """Which kinds of actor may make the move (empty: any). Roles are checked at the
    edge (403); this is the lifecycle's own statement of who moves a job where."""
    settled: frozenset[JobState] = frozenset()
    """States in which the move has already taken effect: a repeat that finds the job
    there is refused like any other, and answered like the move itself."""
    hands_over: MappingProxyType[JobState, HandOver] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """A step that finds its job in one of these states is made as another declared
    transition instead, when that one's actors include the caller (one executor call)."""

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

    def took_effect(self, current: JobState | None) -> bool:
        """Whether a job in ``current`` shows this move already made (``settled``)."""
        return current in self.settled

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

LEASE_HOLDER_KEEPS_STATE: Final[dict[JobState | None, JobState]] = {
    JobState.RUNNING: JobState.RUNNING,
    JobState.CANCEL_REQUESTED: JobState.CANCEL_REQUESTED,
}
"""The lease holder's writes that keep the state (docs/protocol.md §2.3: running -> running)."""


def _declare(
    name: TransitionName,
    moves: dict[JobState | None, JobState],
    doc: str,
    *,
    reasons: dict[JobState, Reason] | None = None,
    effects: tuple[Effect, ...] = (),
    delivery: tuple[DeliveryState, ...] = (),
    actors: tuple[ActorKind, ...] = (),
    settled: tuple[JobState, ...] = (),
    hands_over: dict[JobState, HandOver] | None = None,
    **flags: Any,
) -> Transition:
    """One entry of the table; a fenced move is made by a worker unless it names others."""
    if flags.get("fenced"):
        actors = actors or (ActorKind.WORKER,)
    return Transition(
        name,
        MappingProxyType(moves),
        doc,
        reasons=MappingProxyType(reasons or {}),
        effects=frozenset(effects),
        delivery=frozenset(delivery),
        actors=frozenset(actors),
        settled=frozenset(settled),
        hands_over=MappingProxyType(hands_over or {}),
        **flags,
    )


TRANSITIONS: Final = MappingProxyType(
    {
        t.name: t
        for t in (
            _declare(
                TransitionName.CREATE,
                {None: JobState.QUEUED},
                "POST /v1/jobs accepted and committed.",
                actors=(ActorKind.CLIENT, ActorKind.OPERATOR, ActorKind.SYSTEM),
            ),
            _declare(
                TransitionName.CLAIM,
                {JobState.QUEUED: JobState.RUNNING},
                "A worker claims the job and opens a new attempt.",
                effects=(Effect.OPEN_ATTEMPT, Effect.EXTEND_LEASE),
                actors=(ActorKind.WORKER,),
            ),
            _declare(
                TransitionName.HEARTBEAT,
                LEASE_HOLDER_KEEPS_STATE,
                "The lease holder extends its lease.",
                fenced=True,
                effects=(Effect.EXTEND_LEASE,),
                visible=False,
                records=False,
                skip_locked=True,
            ),
            _declare(
                TransitionName.DECLARE_PLAN,
                LEASE_HOLDER_KEEPS_STATE,
                "The job's stages are declared (plan revision 1), once per job.",
                fenced=True,
                effects=(Effect.PLAN_DECLARED,),
                records=False,
            ),
            _declare(
                TransitionName.RECORD_PROGRESS,
                LEASE_HOLDER_KEEPS_STATE,
                "A stage is entered or a unit of it is done.",
                fenced=True,
                effects=(Effect.STAGE,),
                records=False,
            ),
            _declare(
                TransitionName.EXPAND_PLAN,
                LEASE_HOLDER_KEEPS_STATE,
                "A stage found more units: total grows, plan_revision increments.",
                fenced=True,
                effects=(Effect.PLAN_REVISED,),
            ),
            _declare(
                TransitionName.STAGE_OUTPUT,
                LEASE_HOLDER_KEEPS_STATE,
                "Private outputs changed (never published by this move).",
                fenced=True,
                delivery=(DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE),
                delivery_may_stay=True,
                records=False,
            ),
            _declare(
                TransitionName.RETRY_LATER,
                {JobState.RUNNING: JobState.QUEUED},
                "Recoverable error with budget left.",
                reasons={JobState.QUEUED: Reason.RETRY},
                fenced=True,
                ends_attempt=AttemptOutcome.RETRY,
                effects=(Effect.AVAILABLE_AFTER, Effect.LAST_ERROR),
            ),
            _declare(
                TransitionName.RELEASE,
                {JobState.RUNNING: JobState.QUEUED},
                "Graceful shutdown hands the job back; the attempt is not charged.",
                reasons={JobState.QUEUED: Reason.RETRY},
                fenced=True,
                ends_attempt=AttemptOutcome.RELEASED,
                effects=(Effect.AVAILABLE_NOW, Effect.UNCHARGE),
            ),
            _declare(
                TransitionName.GIVE_UP,
                {JobState.RUNNING: JobState.UNRESOLVED},
                "Recoverable error with budget spent.",
                fenced=True,
                ends_attempt=AttemptOutcome.UNRESOLVED,
                effects=(Effect.LAST_ERROR,),
            ),
            _declare(
                TransitionName.WAIT,
                {JobState.RUNNING: JobState.WAITING},
                "The job reaches a review gate or external wait; the attempt is not charged.",
                fenced=True,
                ends_attempt=AttemptOutcome.WAITING,
                effects=(Effect.WAIT_DEADLINE, Effect.UNCHARGE),
            ),
            _declare(
                TransitionName.REQUEST_CANCEL,
                {
                    JobState.QUEUED: JobState.CANCELED,
                    JobState.WAITING: JobState.CANCELED,
                    JobState.RUNNING: JobState.CANCEL_REQUESTED,
                },
                "Owner or operator asks to cancel.",
                effects=(Effect.CANCEL_MARK,),
                actors=(ActorKind.CLIENT, ActorKind.OPERATOR),
                # A repeat after the cancel took effect is answered like the first.
                settled=(JobState.CANCEL_REQUESTED, JobState.CANCELED),
                # Unresolved work is canceled by an operator's decision.
                hands_over={
                    JobState.UNRESOLVED: HandOver(
                        TransitionName.OPERATOR_CANCEL, note="canceled by an operator"
                    )
                },
            ),
            _declare(
                TransitionName.STOP_CANCELED,
                {JobState.CANCEL_REQUESTED: JobState.CANCELED},
                "The worker stopped at a safe point.",
                fenced=True,
                ends_attempt=AttemptOutcome.CANCELED,
            ),
            _declare(
                TransitionName.PUBLISH,
                {
                    JobState.RUNNING: JobState.SUCCEEDED,
                    JobState.CANCEL_REQUESTED: JobState.SUCCEEDED,
                },
                "The publication transaction commits.",
                fenced=True,
                ends_attempt=AttemptOutcome.SUCCEEDED,
                delivery=(DeliveryState.AVAILABLE,),
                effects=(Effect.RESULT,),
            ),
            _declare(
                TransitionName.FAIL,
                {JobState.RUNNING: JobState.FAILED, JobState.CANCEL_REQUESTED: JobState.FAILED},
                "A permanent error in the worker.",
                fenced=True,
                ends_attempt=AttemptOutcome.FAILED,
                effects=(Effect.ERROR,),
            ),
            _declare(
                TransitionName.EXPIRE_RESULT,
                {JobState.SUCCEEDED: JobState.SUCCEEDED},
                "Retention passed; delivery becomes expired.",
                delivery=(DeliveryState.EXPIRED,),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.RESCUE,
                {JobState.RUNNING: JobState.QUEUED, JobState.CANCEL_REQUESTED: JobState.CANCELED},
                "The lease expired; the reaper takes the job back.",
                reasons={JobState.QUEUED: Reason.RETRY},
                guard=Guard.LEASE_EXPIRED,
                ends_attempt=AttemptOutcome.LOST,
                effects=(Effect.AVAILABLE_AFTER, Effect.LAST_ERROR),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.RESCUE_EXHAUSTED,
                {JobState.RUNNING: JobState.UNRESOLVED},
                "The lease expired and the budget is spent.",
                reasons={JobState.UNRESOLVED: Reason.LEASE_LOST},
                guard=Guard.LEASE_EXPIRED,
                ends_attempt=AttemptOutcome.LOST,
                effects=(Effect.LAST_ERROR,),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.APPROVE,
                {JobState.WAITING: JobState.QUEUED},
                "A reviewer approved the job.",
                reasons={JobState.QUEUED: Reason.REVIEW_APPROVED},
                guard=Guard.AWAITING_REVIEW,
                effects=(Effect.AVAILABLE_NOW,),
                actors=(ActorKind.REVIEWER, ActorKind.OPERATOR),
            ),
            _declare(
                TransitionName.RECEIVE_EVENT,
                {JobState.WAITING: JobState.QUEUED},
                "The awaited external event arrived.",
                reasons={JobState.QUEUED: Reason.EVENT_RECEIVED},
                guard=Guard.AWAITING_EVENT,
                effects=(Effect.AVAILABLE_NOW,),
                actors=(ActorKind.SYSTEM, ActorKind.CLIENT, ActorKind.OPERATOR),
            ),
            _declare(
                TransitionName.REJECT,
                {JobState.WAITING: JobState.FAILED},
                "A reviewer rejected the job.",
                reasons={JobState.FAILED: Reason.REVIEW_REJECTED},
                guard=Guard.AWAITING_REVIEW,
                effects=(Effect.ERROR,),
                actors=(ActorKind.REVIEWER, ActorKind.OPERATOR),
            ),
            _declare(
                TransitionName.DEADLINE_FAIL,
                {JobState.WAITING: JobState.FAILED},
                "The wait deadline passed; the rule says fail.",
                reasons={JobState.FAILED: Reason.DEADLINE_PASSED},
                guard=Guard.DEADLINE_RULE_FAIL,
                effects=(Effect.ERROR,),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.DEADLINE_ESCALATE,
                {JobState.WAITING: JobState.UNRESOLVED},
                "The wait deadline passed; the rule says escalate.",
                reasons={JobState.UNRESOLVED: Reason.DEADLINE_ESCALATED},
                guard=Guard.DEADLINE_RULE_ESCALATE,
                effects=(Effect.LAST_ERROR,),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.RESUME,
                {JobState.UNRESOLVED: JobState.QUEUED},
                "An operator resumes with a new attempt budget.",
                reasons={JobState.QUEUED: Reason.RESUMED},
                effects=(Effect.AVAILABLE_NOW, Effect.NEW_BUDGET),
                actors=(ActorKind.OPERATOR,),
            ),
            _declare(
                TransitionName.OPERATOR_CANCEL,
                {JobState.UNRESOLVED: JobState.CANCELED},
                "An operator cancels unresolved work.",
                actors=(ActorKind.OPERATOR,),
            ),
            _declare(
                TransitionName.OPERATOR_FAIL,
                {JobState.UNRESOLVED: JobState.FAILED},
                "An operator fails unresolved work.",
                reasons={JobState.FAILED: Reason.OPERATOR},
                effects=(Effect.ERROR,),
                actors=(ActorKind.OPERATOR,),
            ),
            _declare(
                TransitionName.REPLAY,
                {None: JobState.QUEUED},
                "An operator re-runs a terminal job as a new job.",
                actors=(ActorKind.OPERATOR,),
            ),
            _declare(
                TransitionName.RESCHEDULE,
                {JobState.QUEUED: JobState.QUEUED},
                "The owner moves or drops a queued job's delay (``run_at``).",
                guard=Guard.START_OPEN,
                effects=(Effect.RUN_AT,),
                actors=(ActorKind.CLIENT, ActorKind.OPERATOR),
            ),
            _declare(
                TransitionName.MISS_START,
                {JobState.QUEUED: JobState.FAILED},
                "No worker claimed the job by its start deadline (``start_by``).",
                reasons={JobState.FAILED: Reason.START_DEADLINE_PASSED},
                guard=Guard.START_MISSED,
                effects=(Effect.ERROR,),
                actors=(ActorKind.SYSTEM,),
            ),
            _declare(
                TransitionName.RECORD_OPERATION,
                LEASE_HOLDER_KEEPS_STATE,
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


ATTENTION_STATES: Final = frozenset(
    {
        JobState.WAITING,
        JobState.UNRESOLVED,
        JobState.CANCEL_REQUESTED,
        JobState.FAILED,
        JobState.CANCELED,
    }
)
"""States an operator searches for that the drain (queued -> running -> succeeded) never
passes through: the partial search index ``ix_jobs_attention`` holds only these."""


# -- bulk operations ------------------------------------------------------------------


class BulkAction(StrEnum):
    """What an operator's bulk operation does to each job it matches."""

    CANCEL = "cancel"
    RESUME = "resume"
    FAIL = "fail"
    REPLAY = "replay"


BULK_MOVES: Final = MappingProxyType(
    {
        BulkAction.CANCEL: MappingProxyType(
            {
                JobState.QUEUED: TransitionName.REQUEST_CANCEL,
                JobState.WAITING: TransitionName.REQUEST_CANCEL,
                JobState.RUNNING: TransitionName.REQUEST_CANCEL,
                JobState.UNRESOLVED: TransitionName.OPERATOR_CANCEL,
            }
        ),
        BulkAction.RESUME: MappingProxyType({JobState.UNRESOLVED: TransitionName.RESUME}),
        BulkAction.FAIL: MappingProxyType({JobState.UNRESOLVED: TransitionName.OPERATOR_FAIL}),
        BulkAction.REPLAY: MappingProxyType(
            {state: TransitionName.REPLAY for state in sorted(TERMINAL_STATES)}
        ),
    }
)
"""Each bulk action as the named transition it applies from each state it acts on; a
job in any other state is skipped (``SkipReason``), never touched."""


class BulkSkip(StrEnum):
    """Why a bulk operation passed over a job it matched (the ``skipped`` counts; a job
    in a state the action does not act on is ``not_allowed_in_state:<state>``)."""

    ALREADY_ENDED = "already_ended"
    """The job is terminal and the action needs it unfinished."""
    ALREADY_CANCELING = "already_canceling"
    """A cancel found the job's cancel already requested."""
    ALREADY_REPLAYED = "already_replayed"
    """A replay found the job already replayed (by anyone, earlier)."""
    OUTSIDE_SCOPE = "outside_scope"
    """The job's kind is not among the kinds the operator's key may act on."""
    NOT_FOUND = "not_found"
    """An id of the list names no job (or it was pruned)."""


def not_allowed_in(state: JobState) -> str:
    """The skip reason of a job whose state the action does not act on."""
    return f"not_allowed_in_state:{state.value}"


def bulk_skip(action: BulkAction, state: JobState) -> str | None:
    """Why ``action`` passes over a job in ``state``, or ``None`` when it acts on it."""
    if state in BULK_MOVES[action]:
        return None
    if state in TERMINAL_STATES and action is not BulkAction.REPLAY:
        return BulkSkip.ALREADY_ENDED.value
    if state == JobState.CANCEL_REQUESTED and action is BulkAction.CANCEL:
        return BulkSkip.ALREADY_CANCELING.value
    return not_allowed_in(state)


class BulkOperationState(StrEnum):
    """The state of a bulk operation (the resource, not its jobs)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"


BULK_OPERATION_STATES: Final = tuple(s.value for s in BulkOperationState)
TERMINAL_BULK_OPERATION_STATES: Final = (
    BulkOperationState.SUCCEEDED.value,
    BulkOperationState.FAILED.value,
    BulkOperationState.CANCELED.value,
)
BULK_OPERATION_DOCS: Final = MappingProxyType(
    {
        BulkOperationState.QUEUED: "Accepted; no worker has started it.",
        BulkOperationState.RUNNING: "A worker is acting on its jobs, a batch at a time.",
        BulkOperationState.SUCCEEDED: "Every matched job was acted on or skipped (with why).",
        BulkOperationState.FAILED: "It stopped on an error (``error``); its counts stand.",
        BulkOperationState.CANCELED: "Canceled by an operator; the batches done stand.",
    }
)


ALL_STATES: Final = tuple(JobState)
ALL_DELIVERY_STATES: Final = tuple(DeliveryState)
ALL_REASONS: Final = tuple(Reason)
