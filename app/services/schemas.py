"""Request and response models: the public field names of the API.

Base/Create/Public split: ``*Create`` models are what clients send, ``*Public`` what
they read. Every vocabulary is an enum so a generated SDK gets real types. Field names
are part of the contract (docs/protocol.md §3).
"""

from __future__ import annotations

import json
import re
import uuid
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    create_model,
    field_validator,
    model_serializer,
)

from atlas_jobs._app.fairness import (
    DEFAULT_PRIORITY,
    JOB_KEY_PATTERN,
    MAX_PERIOD_SECONDS,
    MAX_PRIORITY,
    MAX_RATE,
    MIN_PRIORITY,
)
from atlas_jobs._app.kinds import KINDS, KindSpec
from atlas_jobs._app.lifecycle import (
    DeliveryState,
    JobState,
    Reason,
    TransitionName,
    WaitingReason,
)
from atlas_jobs._app.tags import MAX_TAGS, Tag


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests -----------------------------------------------------------------------


MAX_AHEAD_SECONDS = 365 * 24 * 3600
"""How far ahead a job's ``run_at`` or ``start_by`` may lie: one year (365 days)."""


def _rfc3339(value: Any) -> Any:
    """An instant is an RFC 3339 string (a datetime from Python callers), never a number
    of seconds: pydantic would read ``1733130000`` as one."""
    if isinstance(value, str | datetime) or value is None:
        return value
    raise ValueError("expected an RFC 3339 date-time string")


Instant = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]


class JobCreateBase(StrictModel):
    """``POST /v1/jobs``: what to run. One variant per registered kind (``kind`` is the
    discriminator), so the schema -- and a generated SDK -- knows each kind's input."""

    kind: str
    input: BaseModel
    notify: uuid.UUID | None = Field(
        default=None,
        description=(
            "The id of one of the owner's webhook endpoints (POST /v1/webhooks) to call "
            "when the job ends (succeeded, failed, canceled), becomes unresolved, or its "
            "result expires."
        ),
    )
    run_at: Instant | None = Field(
        default=None,
        description="Not before this instant (RFC 3339 with an offset). One in the past "
        "means now; at most one year ahead. Not with `delay_seconds`; not on a schedule's "
        "job.",
        examples=["2026-12-02T09:00:00Z"],
    )
    delay_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_AHEAD_SECONDS,
        description="Not before this many seconds after the creation (a schedule's job: "
        "after its tick; at most one year). Not with `run_at`.",
        examples=[600],
    )
    start_by: Instant | None = Field(
        default=None,
        description="The start deadline: a job no worker claimed by then never starts and "
        "ends `failed` with reason `start_deadline_passed`. Ahead of now, after the job's "
        "not-before, at most one year ahead. Not with `start_within_seconds`; not on a "
        "schedule's job.",
        examples=["2026-12-02T10:00:00Z"],
    )
    start_within_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_AHEAD_SECONDS,
        description="The start deadline as seconds after the creation (a schedule's job: "
        "after its tick); more than `delay_seconds`. Not with `start_by`.",
        examples=[3600],
    )
    priority: StrictInt | None = Field(
        default=None,
        ge=MIN_PRIORITY,
        le=MAX_PRIORITY,
        description=(
            f"{MIN_PRIORITY}-{MAX_PRIORITY}, default {DEFAULT_PRIORITY}: among the owner's "
            "queued jobs of the same kind (and concurrency key), a higher priority starts "
            "first; FIFO within a priority. It orders an owner's own work: it does not "
            "jump other owners' (fair share)."
        ),
    )
    concurrency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=JOB_KEY_PATTERN,
        description=(
            "For a kind whose concurrency limit is per job key (declared "
            "`Concurrency(per_job=True)`): the key this job counts against, e.g. one customer; "
            "at most the kind's limit of jobs of one key run at once. A kind without "
            "per-job keys refuses it (422)."
        ),
    )
    tags: list[Tag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description=(
            f"Up to {MAX_TAGS} `key=value` labels to find the job by (`GET /v1/jobs?tag=`). "
            "Tags are never confidential: operators and reviewers see them across owners, "
            "and they appear in listings and logs. Keys: letters, digits, `_ . -`; a job's "
            "tags are a set (a repeat is 422) and are returned sorted."
        ),
        examples=[["customer=acme", "batch=2026-12-01"]],
    )


def _create_model_name(kind: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", kind)) + "JobCreate"


def _create_variant(spec: KindSpec) -> type[JobCreateBase]:
    kind_type: Any = Literal[spec.name]
    model: type[JobCreateBase] = create_model(
        _create_model_name(spec.name),
        __base__=JobCreateBase,
        __doc__=f"Create an ``{spec.name}`` job (v{spec.version}): {spec.summary}",
        kind=(kind_type, Field(description="The job kind.")),
        input=(spec.input_model, Field(description="The kind's input.")),
    )
    return model


JOB_CREATE_VARIANTS = tuple(_create_variant(KINDS[name]) for name in sorted(KINDS))

if TYPE_CHECKING:
    JobCreate = JobCreateBase
else:
    JobCreate = Annotated[Union[JOB_CREATE_VARIANTS], Field(discriminator="kind")]  # noqa: UP007


def _batch_item_variant(create: type[JobCreateBase]) -> type[JobCreateBase]:
    name = create.__name__.removesuffix("JobCreate") + "JobBatchItem"
    model: type[JobCreateBase] = create_model(
        name,
        __base__=create,
        __doc__=(create.__doc__ or "").rstrip(".")
        + ". One item of a batch, with its own optional idempotency key.",
        idempotency_key=(
            str | None,
            Field(
                default=None,
                min_length=1,
                max_length=255,
                description=(
                    "Like the Idempotency-Key header of POST /v1/jobs, for this item: the "
                    "same key and body return the existing job (replayed); another body "
                    "is 422 for the whole batch."
                ),
            ),
        ),
    )
    return model


JOB_BATCH_ITEM_VARIANTS = tuple(_batch_item_variant(v) for v in JOB_CREATE_VARIANTS)

if TYPE_CHECKING:

    class JobBatchItem(JobCreateBase):
        idempotency_key: str | None

else:
    JobBatchItem = Annotated[Union[JOB_BATCH_ITEM_VARIANTS], Field(discriminator="kind")]  # noqa: UP007


class JobBatchCreate(StrictModel):
    """``POST /v1/jobs:batch``: many jobs, created atomically (all or none)."""

    jobs: list[JobBatchItem] = Field(
        min_length=1,
        description=(
            "The jobs to create, in order. At most ``ATLAS_BATCH_MAX_JOBS`` items "
            "(default 100); more is 413."
        ),
    )


class OperatorNote(StrictModel):
    """Body of operator actions: an optional note recorded in the job's history."""

    note: str | None = Field(
        default=None, max_length=2000, description="Why; recorded in the job's history."
    )


class SessionsEnd(StrictModel):
    """Whose status-page sessions to end ("log out everywhere"): one key's, every key of
    one owner's, or -- with neither -- every session there is."""

    owner: str | None = Field(
        default=None, min_length=1, max_length=200, description="End every key of this owner's."
    )
    key_id: uuid.UUID | None = Field(default=None, description="End this key's sessions.")


class SessionsEnded(BaseModel):
    """How many status-page sessions were ended; their cookies are refused from now on."""

    ended: int = Field(description="Sessions ended by this request.")


class CancelCreate(StrictModel):
    """Optional body of a cancel: a note recorded in the job's history (an operator's
    cancel of unresolved or waiting work says why)."""

    note: str | None = Field(
        default=None, max_length=2000, description="Why; recorded with the cancel."
    )


class RescheduleCreate(StrictModel):
    """Body of ``POST /v1/jobs/{job_id}/reschedule``: the queued job's new not-before --
    ``run_at`` or ``delay_seconds`` (from now); neither (``{}``) drops the delay."""

    run_at: Instant | None = Field(
        default=None,
        description="Not before this instant (RFC 3339); one in the past means now; at "
        "most one year ahead; not after the job's `start_by`.",
        examples=["2026-12-02T09:30:00Z"],
    )
    delay_seconds: int | None = Field(
        default=None,
        ge=0,
        le=MAX_AHEAD_SECONDS,
        description="Not before this many seconds from now (at most one year).",
        examples=[900],
    )


class SignalCreate(StrictModel):
    """An external event for a job waiting with reason ``external``."""

    event_id: str = Field(
        min_length=1,
        max_length=200,
        description="The event's identity: a repeat with the same id is recorded once.",
    )
    data: dict[str, Any] | None = Field(
        default=None, description="A small JSON object (at most 4096 bytes serialized)."
    )

    @field_validator("data")
    @classmethod
    def _small(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > SIGNAL_MAX_BYTES:
            raise ValueError(f"data must serialize to at most {SIGNAL_MAX_BYTES} bytes")
        return value


SIGNAL_MAX_BYTES = 4096


class ReviewDecision(StrEnum):
    """A reviewer's decision: `approve` queues the job again, `reject` fails it."""

    APPROVE = "approve"
    REJECT = "reject"


class ReviewCreate(StrictModel):
    """Body of `POST /v1/jobs/{job_id}/review`."""

    decision: ReviewDecision = Field(description="Approve or reject the job under review.")
    note: str | None = Field(
        default=None, max_length=2000, description="Why; recorded in the job's history."
    )


# -- the status representation -------------------------------------------------------


class ErrorPublic(BaseModel):
    """An error as recorded by the server. `retryable` false means it is final."""

    code: str = Field(
        description="A stable, machine-readable error code.", examples=["tile_unbuildable"]
    )
    message: str = Field(
        description="What went wrong, for people.",
        examples=["tile summary-source cannot be built from preset reef"],
    )
    retryable: bool = Field(
        description="true for an error the job retries after (a retry's cause); false "
        "when it is final."
    )
    evidence: dict[str, Any] | None = Field(
        default=None,
        description="What automation knew when it gave up (e.g. an unreconciled "
        "operation: its id, destination, checks, last HTTP status or error class).",
    )


class StagePublic(BaseModel):
    """One named stage of the job's plan and its units."""

    name: str = Field(description="The stage's name.", examples=["build"])
    unit: str = Field(description="What the stage counts.", examples=["tiles"])
    done: int = Field(description="Units done so far; kept when the plan grows.", examples=[2])
    total: int = Field(
        description="Units the plan holds now; may grow (then plan_revision increments).",
        examples=[6],
    )


class ProgressPublic(BaseModel):
    """Per-stage units and the plan revision. No percentage, no ETA, on purpose: units
    of different stages cost different amounts."""

    stage: str | None = Field(
        description="The stage being worked on now; null before the first claim."
    )
    plan_revision: int = Field(
        description="Increments each time a stage discovers more required units (0 before "
        "any plan)."
    )
    stages: list[StagePublic] = Field(description="Every stage of the plan, in order.")


class DeliveryPublic(BaseModel):
    """Where the job's result stands, apart from the execution state."""

    state: DeliveryState = Field(
        description="`available` is the only state in which the result can be fetched."
    )
    expires_at: datetime | None = Field(
        description="When a published result stops being retrievable (then `expired`, and "
        "the result and its download links answer 410). The execution state stays "
        "`succeeded`."
    )
    files: int | None = Field(
        default=None,
        description="How many files the published result holds (0: the job published none, "
        "e.g. it published to a destination instead); null until a result is published.",
    )
    destination: str | None = Field(
        default=None,
        description="Where the kind's publish step published the result (the result's "
        "`publication.destination`); null when it published files only, or before a result "
        "is published.",
    )


class CancelPublic(BaseModel):
    """A cancellation request that was recorded."""

    requested_at: datetime = Field(description="When cancellation was requested.")
    requested_by: str = Field(description="Who requested it (the actor).")


class WaitPublic(BaseModel):
    """Why and until when the job waits, and what happens at the deadline."""

    deadline: datetime = Field(description="When the wait ends on its own.")
    on_deadline: str = Field(
        description="What happens at the deadline: `fail` or `escalate` (to `unresolved`)."
    )


class WaitingForPublic(BaseModel):
    """What holds a queued job, when something does. More reasons may be added: a
    client shows `message` for a reason it does not know."""

    reason: WaitingReason = Field(
        description="What holds it: `scheduled` -- its `run_at` is still ahead; "
        "`start_deadline_passed` -- no worker claimed it by its `start_by`, so it will "
        "never start (the next maintenance pass ends it `failed`); `no_worker` -- no live "
        "worker process serves the job's kind@version; `paused` -- an operator paused its "
        "kind (`by`, `at`, `note`); `concurrency` -- its concurrency key is at its limit; "
        "`rate` -- its concurrency key has no start left in its start rate; "
        "`fair_share` -- the queue is behind and other owners take their turn first; "
        "`backlog` -- the queue is behind and older jobs start first."
    )
    kind: str | None = Field(
        default=None,
        description="The `kind@version` it waits for a worker of (reason `no_worker`), or "
        "whose pause holds it (reason `paused`).",
        examples=["atlas.bundle@1"],
    )
    by: str | None = Field(
        default=None,
        description="Who paused the kind (reason `paused`).",
        examples=["operator:ops"],
    )
    at: datetime | None = Field(default=None, description="When the kind was paused.")
    note: str | None = Field(default=None, description="Why, as the operator said.")
    run_at: datetime | None = Field(
        default=None, description="When it may start (reason `scheduled`)."
    )
    start_by: datetime | None = Field(
        default=None, description="The start deadline that passed (reason `start_deadline_passed`)."
    )
    key: str | None = Field(
        default=None,
        description="The concurrency key at its limit (reason `concurrency`) or out of "
        "starts (reason `rate`).",
        examples=["press"],
    )
    starts: int | None = Field(
        default=None, description="The key's start rate: starts per `per_seconds` (`rate`)."
    )
    per_seconds: float | None = Field(
        default=None, description="The period of the key's start rate, in seconds (`rate`)."
    )
    next_start_at: datetime | None = Field(
        default=None,
        description="When the start rate allows the key's next start (`rate`; as of the "
        "API's last view of the keys, at most a few seconds old).",
    )
    limit: int | None = Field(
        default=None, description="The key's limit: jobs running at once (`concurrency`)."
    )
    running: int | None = Field(
        default=None, description="Jobs of the key running now (`concurrency`)."
    )
    ahead_of_you: int | None = Field(
        default=None,
        description="About how many other lanes start a job before this job's lane's "
        "next turn (`fair_share`).",
    )
    estimate: bool | None = Field(
        default=None,
        description="True when the numbers are an estimate (`fair_share`, `backlog`).",
    )
    queue_age_seconds: float | None = Field(
        default=None,
        description="How long the oldest claimable job has waited (`fair_share`, `backlog`).",
    )
    message: str = Field(
        description="One line for people.", examples=["no live worker serves atlas.bundle@1"]
    )

    # Unannotated on purpose: with a return type the document would describe that type,
    # without one it keeps describing this model.
    @model_serializer(mode="wrap")
    def _fields_of_its_reason(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """Only the fields of its reason: a member another reason carries is left out
        rather than sent as null."""
        return {name: value for name, value in handler(self).items() if value is not None}


class JobLinks(BaseModel):
    """Where to go next from this status (paths relative to the API's base URL)."""

    self: str = Field(description="This status (the `Location` of the creation).")
    history: str = Field(description="The job's recorded transitions.")
    events: str = Field(description="The job's Server-Sent Events stream.")
    result: str | None = Field(
        description="The result reference, present only while the result can be fetched "
        "(delivery `available`)."
    )
    cancel: str | None = Field(description="Present while the job can still be canceled.")


class JobPublic(BaseModel):
    """The status of a job. A 200 carrying it is a successful *read*, not job success.
    Terminal states (`succeeded`, `failed`, `canceled`) never change."""

    id: uuid.UUID = Field(description="The job id: opaque and stable.")
    kind: str = Field(description="The job kind.", examples=["atlas.bundle"])
    kind_version: int = Field(description="The version of the kind the job was accepted with.")
    state: JobState = Field(
        description="The execution state. Terminal: `succeeded`, `failed`, `canceled`."
    )
    reason: Reason = Field(description="Why the job is in its state (`retry`, `review`, ...).")
    created_at: datetime = Field(description="When the job was accepted.")
    updated_at: datetime = Field(description="When the job last changed.")
    finished_at: datetime | None = Field(description="When it reached a terminal state.")
    attempt: int = Field(description="Attempts started so far (0 before the first claim).")
    max_attempts: int = Field(description="Attempts allowed before the job needs attention.")
    priority: int = Field(
        description=f"{MIN_PRIORITY}-{MAX_PRIORITY}: a higher one starts first among the "
        "owner's queued jobs of its kind and concurrency key.",
        examples=[DEFAULT_PRIORITY],
    )
    next_attempt_at: datetime | None = Field(description="Set while queued for a retry.")
    last_error: ErrorPublic | None = Field(
        description="The error that caused the pending retry (queued with reason `retry`) "
        "or that left the job `unresolved`; every attempt's error stays in the history."
    )
    lease_expires_at: datetime | None = Field(
        description="While a worker holds the job: when its lease ends without a heartbeat."
    )
    heartbeat_at: datetime | None = Field(description="The holding worker's last heartbeat.")
    wait: WaitPublic | None = Field(description="Set while `waiting`: deadline and its rule.")
    progress: ProgressPublic = Field(description="Per-stage progress and the plan revision.")
    delivery: DeliveryPublic = Field(description="Where the result stands.")
    error: ErrorPublic | None = Field(description="Set when the job failed.")
    cancel: CancelPublic | None = Field(description="Set once cancellation was requested.")
    tags: list[str] = Field(
        default_factory=list, description="The job's `key=value` tags, sorted (never confidential)."
    )
    replay_of: uuid.UUID | None = Field(
        description="The job this one replays (an operator's replay creates a new job)."
    )
    run_at: datetime | None = Field(
        description="The not-before the owner asked for (at creation or by a reschedule; "
        "one in the past was stored as the time it was asked); null without a delay. A "
        "retry's backoff does not change it: see `next_attempt_at`.",
    )
    start_by: datetime | None = Field(
        description="The start deadline: not claimed by then, the job ends `failed` with "
        "reason `start_deadline_passed`; null without one.",
    )
    waiting_for: WaitingForPublic | None = Field(
        description="Set on a queued job that something holds (its `run_at` is ahead, its "
        "start deadline passed, its kind is paused, no live worker serves its kind@version, "
        "its concurrency key is at its limit, the queue is behind: fair share or backlog); "
        "null otherwise. Read from the API's view of the pauses, the live workers and the "
        "claim's lanes and keys, at most ATLAS_LIVE_WORKERS_REFRESH_SECONDS old."
    )
    links: JobLinks = Field(description="Where to go next.")


class JobBatchItemPublic(JobPublic):
    """One job of a batch: its status, and whether an earlier request made it."""

    replayed: bool = Field(
        description="true when the item's idempotency key returned an existing job."
    )


class JobBatchPublic(BaseModel):
    """The jobs of a batch, in request order (`links.self` is each job's Location)."""

    items: list[JobBatchItemPublic] = Field(description="One status per item, in order.")


class JobPage(BaseModel):
    """One page of the caller's jobs, newest first."""

    items: list[JobPublic] = Field(description="The jobs of this page.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class ScheduleTrigger(BaseModel):
    """The schedule tick that created a job."""

    schedule_id: uuid.UUID = Field(description="The schedule that fired.")
    tick: datetime = Field(description="The tick (UTC) the job was created for.")


class HistoryItem(BaseModel):
    """One recorded transition. `from` is null for the creation."""

    model_config = ConfigDict(populate_by_name=True)

    seq: int = Field(description="Position in the job's history (also the SSE event id).")
    at: datetime = Field(description="When the move was committed (database time).")
    from_: JobState | None = Field(
        alias="from",
        serialization_alias="from",
        description="The state before the move; null for the creation.",
    )
    to: JobState = Field(description="The state after the move.")
    transition: TransitionName = Field(description="The named transition that was applied.")
    reason: Reason | Literal["cancel_too_late", "decision_too_late", "operation"] | None = Field(
        description="The reason the job got with this move; for items that change nothing: "
        "`cancel_too_late` (a cancel that found the job already terminal), "
        "`decision_too_late` (a review decision or signal that lost to the wait's "
        "deadline), `operation` (an external operation's entry, in `data`)."
    )
    actor: str = Field(description="Who made the move (`client:<owner>`, `worker:<id>`, ...).")
    attempt: int | None = Field(description="Attempt number the move belongs to.")
    attempt_id: uuid.UUID | None = Field(
        description="The attempt's id (the fencing token of the worker that held it)."
    )
    event_id: str | None = Field(description="The external event id that caused the move.")
    note: str | None = Field(description="A note given with the move (operator, reviewer).")
    error: ErrorPublic | None = Field(
        default=None,
        description="The error this move recorded: a retry's cause (`retry_later`, "
        "`rescue`), a give-up's or a failure's. Kept for every attempt, so the history "
        "still shows why a job retried after it succeeded.",
    )
    count: int = Field(
        default=1,
        ge=1,
        description="How many identical requests this item stands for: a late cancel "
        "repeated by the same actor is recorded once, with a count.",
    )
    data: dict[str, Any] | None = Field(
        default=None,
        description="What the move recorded besides its columns: an error, a deadline, "
        "an external operation's entry (operation_id, outcome, http_status, "
        "error_class; never a payload or a secret); on the creation, when the service "
        "traces (OpenTelemetry), the creating request's W3C `traceparent`, which every "
        "attempt's span continues.",
    )

    trigger: ScheduleTrigger | None = Field(
        default=None,
        description="On the creation of a job made by a schedule: which schedule and tick.",
    )


class SignalPublic(BaseModel):
    """A received signal and its first outcome (a repeat answers the same)."""

    job_id: uuid.UUID = Field(description="The job the signal was sent to.")
    event_id: str = Field(description="The sender's event id (repeats are recorded once).")
    received_at: datetime = Field(description="When the first delivery of the event arrived.")
    actor: str = Field(description="Who sent it (`client:<owner>` or `operator:<owner>`).")
    state: JobState = Field(description="The job's state right after the first delivery.")
    reason: Reason = Field(description="The job's reason right after the first delivery.")


class HistoryPage(BaseModel):
    """A page of a job's history, oldest first."""

    job_id: uuid.UUID = Field(description="The job.")
    items: list[HistoryItem] = Field(description="The transitions of this page, by seq.")
    next_after: int | None = Field(
        default=None,
        description="More items exist: pass this as `after` for the next page "
        "(null on the last page).",
    )


class ResultFile(BaseModel):
    """One file of a published result."""

    name: str = Field(description="The file name.", examples=["bundle.zip"])
    size: int = Field(description="Size in bytes.")
    sha256: str = Field(description="Hex SHA-256 of the bytes; check it after downloading.")
    url: str = Field(description="Signed download URL; no API key needed; expires.")
    token: str = Field(
        description="The signed token of `url`: pass it to the download operation "
        "(`GET /v1/downloads/{token}`)."
    )
    url_expires_at: datetime = Field(description="When `url` and `token` stop working.")


class PublicationSettled(StrEnum):
    """How an external publication was settled."""

    CONFIRMED = "confirmed"
    """The destination's answer to the publication confirmed it."""
    ADOPTED = "adopted"
    """A lookup at the destination found it applied (after an uncertain answer, a
    confirmation that came later, or a repeat after a crash), and the job adopted it."""


class PublicationPublic(BaseModel):
    """Where a job's external publication lives (kinds that publish to a destination,
    such as `document.publish`, rather than files)."""

    destination: str = Field(
        description="The configured destination's name (ATLAS_DESTINATIONS).",
        examples=["press"],
    )
    operation_id: uuid.UUID = Field(
        description="The operation id, stable across attempts: the destination knows the "
        "publication by it (it was the `Idempotency-Key` of the request)."
    )
    settled: PublicationSettled = Field(description="How the publication was settled.")
    receipt: dict[str, Any] = Field(
        description="The destination's receipt, as it answered (for example its own id "
        "and URL of the publication)."
    )


class ResultPublic(BaseModel):
    """The result reference of a job whose delivery is `available`: its files, or where
    its external publication lives (or both)."""

    job_id: uuid.UUID = Field(description="The job.")
    delivery: DeliveryPublic = Field(description="The delivery state and its expiry.")
    files: list[ResultFile] = Field(description="The published files (may be empty).")
    publication: PublicationPublic | None = Field(
        default=None,
        description="Where the job published its result outside the service (null for "
        "kinds that only publish files).",
    )
    reference: dict[str, Any] = Field(
        default_factory=dict,
        description="What the handler returned besides its files (its `Result.reference`: "
        "an instance of the kind's result model when it declares one); `{}` when nothing.",
    )


class QueueLinePublic(BaseModel):
    """Jobs of one kind, version and state."""

    kind: str = Field(description="The job kind.")
    kind_version: int = Field(description="The kind's version.")
    state: JobState = Field(description="The execution state counted.")
    count: int = Field(description="How many jobs.")
    oldest_created_at: datetime = Field(description="Creation time of the oldest of them.")
    oldest_age_seconds: float = Field(description="Its age now, in seconds.")
    live_leases: int = Field(description="Held by a worker with a live lease.")
    expired_leases: int = Field(description="Held with a lease past its end (to be rescued).")


class QueueSchedulePublic(BaseModel):
    """An enabled schedule in the queue view: when it fires next, and how late it is."""

    id: uuid.UUID = Field(description="The schedule (GET /v1/schedules/{id}).")
    owner: str = Field(description="Whose jobs it creates.")
    name: str | None = Field(description="Its label.")
    kind: str = Field(description="The kind of job it creates.")
    cron: str = Field(description="Its cron expression.")
    timezone: str = Field(description="The zone the expression is read in.")
    next_fire_at: datetime = Field(description="The next tick.")
    last_fire_at: datetime | None = Field(description="The last tick that created a job.")
    overdue_seconds: float = Field(
        description="How long the next tick is past due (0 while the scheduler keeps up)."
    )


class QueuePublic(BaseModel):
    """The queue view (operators)."""

    lines: list[QueueLinePublic] = Field(description="One line per kind, version and state.")
    schedules: list[QueueSchedulePublic] = Field(
        default_factory=list,
        description="Enabled schedules, the soonest (or most overdue) tick first; at most 100.",
    )
    webhooks_pending: int = Field(
        default=0, description="Webhook deliveries waiting for an attempt or being sent."
    )


class KindVersionPublic(BaseModel):
    """One version of a kind: whether the API accepts it, and who runs it now."""

    version: int = Field(description="The kind's version.")
    accepted: bool = Field(
        description="The API creates jobs of this version (the kind's version) or "
        "declares it compatible; false for a version only live workers name."
    )
    live_workers: int = Field(
        description="Live worker processes serving it now (their registry heartbeat is "
        "within ATLAS_WORKER_LIVE_WINDOW_SECONDS), compatible handlers included."
    )


class RateSet(StrictModel):
    """A start rate: at most `starts` jobs of the key start per `per_seconds`."""

    # One model for every rate: what an operator sets (``PUT /v1/scheduling/keys/{key}``,
    # validated), what a key shows, and what a kind declares (``GET /v1/kinds``; a
    # declared ``Rate`` has the same bounds, so building this from one never fails).
    starts: StrictInt = Field(ge=1, le=MAX_RATE, description="Starts allowed per period.")
    per_seconds: float = Field(gt=0, le=MAX_PERIOD_SECONDS, description="The period, in seconds.")


class ConcurrencyPublic(BaseModel):
    """What a kind declares of its concurrency key (operators may override both numbers
    per key: `GET /v1/scheduling`)."""

    key: str = Field(description="The key its jobs share (a job's own key is `<key>/<named>`).")
    limit: int | None = Field(description="At most this many of the key's jobs run at once.")
    rate: RateSet | None = Field(description="The key's start rate (null: none).")
    per_job: bool = Field(description="Whether a job may name its own key (`concurrency_key`).")


class KindPublic(BaseModel):
    """A job kind."""

    name: str = Field(description="The kind, as POST /v1/jobs names it.", examples=["atlas.bundle"])
    version: int | None = Field(
        description="The version new jobs get; null for a kind only live workers serve "
        "(the API does not accept it)."
    )
    description: str | None = Field(description="What the kind does.")
    input_schema: dict[str, Any] | None = Field(
        description="The JSON Schema of the kind's input; null for a kind the API does not accept."
    )
    versions: list[KindVersionPublic] = Field(
        description="Every version the API accepts or a live worker serves, oldest first."
    )
    concurrency: ConcurrencyPublic | None = Field(
        default=None,
        description="Its concurrency declaration: a limit and/or a start rate per key (null: "
        "none, or a kind the API does not accept).",
    )


class KindsPublic(BaseModel):
    """Every kind the API accepts and every kind a live worker serves."""

    kinds: list[KindPublic] = Field(description="The kinds, by name.")


class Problem(BaseModel):
    """RFC 9457 problem details (`application/problem+json`). `type` names the case;
    some cases add extension members (see `JobStateProblem`, `ValidationProblem`,
    `BatchTooLargeProblem`)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(
        description="The problem type, one of `ProblemType` (`urn:atlas-jobs:problem:*`).",
        examples=["urn:atlas-jobs:problem:job-not-found"],
    )
    title: str = Field(description="A short summary of the problem type.")
    status: int = Field(description="The HTTP status code.")
    detail: str | None = Field(default=None, description="What happened in this case.")


class JobStateProblem(Problem):
    """409: the job's state does not allow the action (a cancel that lost, a review of a
    job that is not waiting for one, a result that is not ready). Names the state."""

    state: JobState = Field(description="The job's execution state now.")
    delivery: DeliveryState = Field(description="The job's delivery state now.")
    job: JobPublic | None = Field(
        default=None,
        description="The whole status when a cancel lost: it shows how the job ended.",
    )
    decision: ReviewDecision | None = Field(
        default=None,
        description="The review decision that took effect, when a review conflicts with it.",
    )


class ValidationIssue(BaseModel):
    """One reason a request does not validate (never the offending value)."""

    loc: list[str] = Field(
        description="Where: `body.input.pages`, `body.jobs.3.input.pages`, `query.limit`."
    )
    msg: str = Field(description="What is wrong, for people.")
    type: str = Field(description="A machine-readable error type (pydantic's).")


class ValidationProblem(Problem):
    """422: the request does not validate (unknown kind, invalid input, bad parameter)."""

    errors: list[ValidationIssue] | None = Field(
        default=None, description="Every issue found, located."
    )


class BatchTooLargeProblem(Problem):
    """413 `batch-too-large`: the batch holds more jobs than the server allows."""

    max_jobs: int | None = Field(
        default=None, description="The most jobs one batch may hold; send smaller ones."
    )


class Health(BaseModel):
    """Liveness or readiness of this process."""

    status: str = Field(description="`ok`, or why not.")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Each check by name and its outcome."
    )
