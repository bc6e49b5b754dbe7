"""Request and response models of ``/v1/schedules`` (cron triggers)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictBool, StrictInt, model_validator
from pydantic.json_schema import SkipJsonSchema

from atlas_jobs._app.scheduling import MAX_CATCH_UP_LIMIT, FireRefusal, MisfirePolicy, OverlapPolicy
from atlas_jobs._app.services.schemas import JobCreate, StrictModel

CRON_DESCRIPTION = (
    "A cron expression: five fields (minute hour day-of-month month day-of-week), or six "
    "with seconds last (`* * * * * */10` is every 10 seconds), read in `timezone`."
)
TIMEZONE_DESCRIPTION = (
    "The IANA time zone the expression is read in. On the night clocks go back, a "
    "fixed-time schedule (`30 2 * * *`) fires once."
)
POLICY_DESCRIPTION = (
    "Ticks no process could fire in time (downtime): `skip` fires a tick only within "
    "`misfire_grace_seconds` of its time; `catch_up` fires the missed ticks late, at most "
    "`catch_up_limit` of them (the most recent)."
)
GRACE_DESCRIPTION = "How late a tick may still fire under `skip`, in seconds."
LIMIT_DESCRIPTION = "At most this many missed ticks fire under `catch_up`."
OVERLAP_DESCRIPTION = (
    "While the job of the previous tick is unfinished: `allow` creates the next one anyway; "
    "`skip` skips the tick (at most one unfinished job per schedule)."
)
NAME_DESCRIPTION = "A label for people; not unique."
MAX_GRACE_SECONDS = 86_400


GraceSeconds = Annotated[StrictInt, Field(ge=1, le=MAX_GRACE_SECONDS)]
CatchUpLimit = Annotated[StrictInt, Field(ge=1, le=MAX_CATCH_UP_LIMIT)]


class ScheduleCreate(StrictModel):
    """``POST /v1/schedules``: create ``job`` at every tick of ``cron`` in ``timezone``."""

    name: str | None = Field(default=None, max_length=200, description=NAME_DESCRIPTION)
    cron: str = Field(
        min_length=1, max_length=200, description=CRON_DESCRIPTION, examples=["0 2 * * *"]
    )
    timezone: str = Field(
        default="UTC",
        min_length=1,
        max_length=64,
        description=TIMEZONE_DESCRIPTION,
        examples=["Europe/Berlin"],
    )
    job: JobCreate = Field(description="The job each tick creates: the body of POST /v1/jobs.")
    enabled: StrictBool = Field(default=True, description="Whether ticks fire.")
    misfire_policy: MisfirePolicy = Field(
        default=MisfirePolicy.SKIP, description=POLICY_DESCRIPTION
    )
    misfire_grace_seconds: StrictInt = Field(
        default=60, ge=1, le=MAX_GRACE_SECONDS, description=GRACE_DESCRIPTION
    )
    catch_up_limit: StrictInt = Field(
        default=10, ge=1, le=MAX_CATCH_UP_LIMIT, description=LIMIT_DESCRIPTION
    )
    overlap: OverlapPolicy = Field(default=OverlapPolicy.ALLOW, description=OVERLAP_DESCRIPTION)
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Operators only: the owner of the schedule and of the jobs it creates.",
    )


class ScheduleChange(StrictModel):
    """``PATCH /v1/schedules/{id}``: the fields to change; absent fields stay (only
    ``name`` may be null). A new ``cron`` or ``timezone``, or ``enabled`` turned back on,
    starts from the next tick after now (a paused schedule does not catch up its pause)."""

    # Absent is not null: a field left out stays as it is; an explicit null (but for
    # ``name``) is 422, and the schema says so (``SkipJsonSchema`` keeps null out of it).
    name: str | None = Field(default=None, max_length=200, description=NAME_DESCRIPTION)
    cron: str | SkipJsonSchema[None] = Field(
        default=None, min_length=1, max_length=200, description=CRON_DESCRIPTION
    )
    timezone: str | SkipJsonSchema[None] = Field(
        default=None, min_length=1, max_length=64, description=TIMEZONE_DESCRIPTION
    )
    job: JobCreate | SkipJsonSchema[None] = Field(
        default=None,
        description="The job each tick creates: replaces the template whole, so a field "
        "it leaves out (`tags` too) is dropped.",
    )
    enabled: StrictBool | SkipJsonSchema[None] = Field(
        default=None, description="Whether ticks fire."
    )
    misfire_policy: MisfirePolicy | SkipJsonSchema[None] = Field(
        default=None, description=POLICY_DESCRIPTION
    )
    # The bounds sit on the integer itself (Annotated), not on the union with None: on the
    # union pydantic would write them into the schema as the unknown keys `ge`/`le`, and
    # the document would show an unbounded integer the server refuses 0 for.
    misfire_grace_seconds: GraceSeconds | SkipJsonSchema[None] = Field(
        default=None, description=GRACE_DESCRIPTION
    )
    catch_up_limit: CatchUpLimit | SkipJsonSchema[None] = Field(
        default=None, description=LIMIT_DESCRIPTION
    )
    overlap: OverlapPolicy | SkipJsonSchema[None] = Field(
        default=None, description=OVERLAP_DESCRIPTION
    )

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            nulls = sorted(k for k, v in data.items() if v is None and k != "name")
            if nulls:
                raise ValueError(f"may not be null: {', '.join(nulls)}")
        return data


class ScheduledJob(BaseModel):
    """The job each tick creates."""

    kind: str = Field(description="The job kind.")
    kind_version: int = Field(description="The kind's version the input was validated for.")
    input: dict[str, Any] = Field(description="The kind's input, as validated.")
    notify: uuid.UUID | None = Field(
        default=None, description="The webhook endpoint each created job notifies."
    )
    delay_seconds: int | None = Field(
        default=None, description="Each job is not started before its tick plus this."
    )
    start_within_seconds: int | None = Field(
        default=None,
        description="Each job fails (`start_deadline_passed`) unless a worker claims it by "
        "its tick plus this.",
    )
    priority: int | None = Field(
        default=None, description="Each created job's priority (null: the default)."
    )
    concurrency_key: str | None = Field(
        default=None, description="The concurrency key each created job names."
    )
    tags: list[str] = Field(
        default_factory=list,
        description="The `key=value` tags each created job carries, sorted (never confidential).",
    )


class SchedulePublic(BaseModel):
    """A schedule: when it fires, what it creates, and what it fired last."""

    id: uuid.UUID = Field(description="The schedule's id.")
    url: str = Field(description="The schedule's URL.")
    owner: str = Field(description="Who owns the schedule and the jobs it creates.")
    name: str | None = Field(description=NAME_DESCRIPTION)
    cron: str = Field(description=CRON_DESCRIPTION)
    timezone: str = Field(description=TIMEZONE_DESCRIPTION)
    job: ScheduledJob = Field(
        description="What each tick creates: kind, input, notify, timing, priority, "
        "concurrency key and tags."
    )
    enabled: bool = Field(description="Whether ticks fire.")
    misfire_policy: MisfirePolicy = Field(description=POLICY_DESCRIPTION)
    misfire_grace_seconds: int = Field(description=GRACE_DESCRIPTION)
    catch_up_limit: int = Field(description=LIMIT_DESCRIPTION)
    overlap: OverlapPolicy = Field(description=OVERLAP_DESCRIPTION)
    next_fire_at: datetime | None = Field(
        description="The next tick (null while disabled); a tick past due fires at once."
    )
    last_fire_at: datetime | None = Field(description="The last tick that created a job.")
    last_job_id: uuid.UUID | None = Field(description="The job the last tick created.")
    last_job_url: str | None = Field(description="That job's status URL.")
    fired_count: int = Field(description="How many jobs this schedule created.")
    refused_count: int = Field(
        description="How many ticks created no job because admission refused them "
        "(see the fire history)."
    )
    last_refused_at: datetime | None = Field(description="The last tick refused.")
    last_refusal: FireRefusal | None = Field(description="Why the last refused tick was.")
    created_at: datetime = Field(description="When the schedule was created.")
    updated_at: datetime = Field(description="When it last changed (or fired).")


class SchedulePage(BaseModel):
    """A page of schedules."""

    items: list[SchedulePublic] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


class ScheduleFirePublic(BaseModel):
    """One fired tick and the job it created (null if that job was since deleted), or
    why it created none (`refusal`)."""

    tick: datetime = Field(description="The tick's instant (UTC).")
    job_id: uuid.UUID | None = Field(description="The job the tick created.")
    job_url: str | None = Field(description="That job's status URL.")
    recorded_at: datetime = Field(description="When the tick fired (later than `tick` if late).")
    refusal: FireRefusal | None = Field(
        default=None,
        description="Why the tick created no job: `owner_at_capacity` -- the owner had its "
        "cap of unfinished jobs (as POST /v1/jobs answers 429). Null when it created one.",
    )


class ScheduleFirePage(BaseModel):
    """A page of a schedule's fired ticks."""

    items: list[ScheduleFirePublic] = Field(description="Newest tick first.")
    next_before: datetime | None = Field(description="Pass as ?before= for the next page.")
