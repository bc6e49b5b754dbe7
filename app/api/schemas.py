"""Request and response models: the public field names of the API.

Base/Create/Public split: ``*Create`` models are what clients send, ``*Public`` what
they read. Every vocabulary is an enum so a generated SDK gets real types. Field names
are part of the contract (SPEC section 3).
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.kinds import KINDS, KindSpec
from app.lifecycle import DeliveryState, JobState, Reason


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- requests -----------------------------------------------------------------------


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

    note: str | None = Field(default=None, max_length=2000)


class ReviewDecision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class ReviewCreate(StrictModel):
    decision: ReviewDecision
    note: str | None = Field(default=None, max_length=2000)


# -- the status representation -------------------------------------------------------


class ErrorPublic(BaseModel):
    """An error as recorded by the server. ``retryable`` false means it is final."""

    code: str
    message: str
    retryable: bool


class StagePublic(BaseModel):
    name: str
    unit: str
    done: int
    total: int


class ProgressPublic(BaseModel):
    """Per-stage units and the plan revision. No percentage, no ETA, on purpose."""

    stage: str | None
    plan_revision: int
    stages: list[StagePublic]


class DeliveryPublic(BaseModel):
    state: DeliveryState
    expires_at: datetime | None


class CancelPublic(BaseModel):
    requested_at: datetime
    requested_by: str


class WaitPublic(BaseModel):
    """Why and until when the job waits, and what happens at the deadline."""

    deadline: datetime
    on_deadline: str


class JobLinks(BaseModel):
    self: str
    history: str
    events: str
    result: str | None = Field(description="Present when the result can be fetched.")
    cancel: str | None = Field(description="Present while the job can still be canceled.")


class JobPublic(BaseModel):
    """The status of a job. A 200 carrying it is a successful *read*, not job success."""

    id: uuid.UUID
    kind: str = Field(description="The job kind.")
    kind_version: int
    state: JobState
    reason: Reason
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    attempt: int = Field(description="Attempts started so far (0 before the first claim).")
    max_attempts: int
    next_attempt_at: datetime | None = Field(description="Set while queued for a retry.")
    last_error: ErrorPublic | None = Field(description="The error that caused the last retry.")
    lease_expires_at: datetime | None
    heartbeat_at: datetime | None
    wait: WaitPublic | None
    progress: ProgressPublic
    delivery: DeliveryPublic
    error: ErrorPublic | None = Field(description="Set when the job failed.")
    cancel: CancelPublic | None = Field(description="Set once cancellation was requested.")
    replay_of: uuid.UUID | None
    links: JobLinks


class JobBatchItemPublic(JobPublic):
    """One job of a batch: its status, and whether an earlier request made it."""

    replayed: bool = Field(
        description="true when the item's idempotency key returned an existing job."
    )


class JobBatchPublic(BaseModel):
    """The jobs of a batch, in request order (``links.self`` is each job's Location)."""

    items: list[JobBatchItemPublic]


class JobPage(BaseModel):
    items: list[JobPublic]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class ScheduleTrigger(BaseModel):
    """The schedule tick that created a job."""

    schedule_id: uuid.UUID = Field(description="The schedule that fired.")
    tick: datetime = Field(description="The tick (UTC) the job was created for.")


class HistoryItem(BaseModel):
    """One recorded transition. ``from`` is null for the creation."""

    model_config = ConfigDict(populate_by_name=True)

    seq: int
    at: datetime
    from_: JobState | None = Field(alias="from", serialization_alias="from")
    to: JobState
    transition: str
    reason: str | None
    actor: str
    attempt: int | None = Field(description="Attempt number the move belongs to.")
    attempt_id: uuid.UUID | None
    event_id: str | None
    note: str | None
    count: int = Field(
        default=1,
        ge=1,
        description="How many identical requests this item stands for: a late cancel "
        "repeated by the same actor is recorded once, with a count.",
    )
    trigger: ScheduleTrigger | None = Field(
        default=None,
        description="On the creation of a job made by a schedule: which schedule and tick.",
    )


class HistoryPage(BaseModel):
    job_id: uuid.UUID
    items: list[HistoryItem]
    next_after: int | None = Field(
        default=None,
        description="More items exist: pass this as `after` for the next page "
        "(null on the last page).",
    )


class ResultFile(BaseModel):
    name: str
    size: int
    sha256: str
    url: str = Field(description="Signed download URL; no API key needed; expires.")
    url_expires_at: datetime


class ResultPublic(BaseModel):
    job_id: uuid.UUID
    delivery: DeliveryPublic
    files: list[ResultFile]


class QueueLinePublic(BaseModel):
    kind: str
    kind_version: int
    state: JobState
    count: int
    oldest_created_at: datetime
    oldest_age_seconds: float
    live_leases: int
    expired_leases: int


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
    lines: list[QueueLinePublic]
    schedules: list[QueueSchedulePublic] = Field(
        default_factory=list,
        description="Enabled schedules, the soonest (or most overdue) tick first; at most 100.",
    )
    webhooks_pending: int = Field(
        default=0, description="Webhook deliveries waiting for an attempt or being sent."
    )


class Problem(BaseModel):
    """RFC 9457 problem details; extension members vary by ``type``."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str | None = None


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
