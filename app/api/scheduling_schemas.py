"""Request and response models of ``/v1/scheduling`` (operators' shares and key limits)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, StrictInt

from atlas_jobs._app.fairness import MAX_KEY_LIMIT, MAX_PERIOD_SECONDS, MAX_RATE, MAX_SHARE
from atlas_jobs._app.services.schemas import StrictModel

NOTE = Field(default=None, max_length=500, description="Why: recorded with the change.")


class OwnerShareSet(StrictModel):
    """`PUT /v1/scheduling/owners/{owner}`: the owner's weight in the fair share."""

    share: StrictInt = Field(
        ge=1,
        le=MAX_SHARE,
        description="A weight: with share 3 an owner's lanes take three jobs for every one "
        "of an owner with the default share 1 while both have queued work.",
    )
    note: str | None = NOTE


class OwnerSharePublic(BaseModel):
    owner: str
    share: int
    updated_by: str = Field(description="The operator who set it.")
    updated_at: datetime


class RateSet(StrictModel):
    """A start rate: at most `starts` jobs of the key start per `per_seconds`."""

    starts: StrictInt = Field(ge=1, le=MAX_RATE, description="Starts allowed per period.")
    per_seconds: float = Field(gt=0, le=MAX_PERIOD_SECONDS, description="The period, in seconds.")


class KeySet(StrictModel):
    """`PUT /v1/scheduling/keys/{key}`: an operator's limit and start rate for a
    concurrency key; null restores the kind's declared limit / no rate."""

    max_running: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_KEY_LIMIT,
        description="At most this many jobs of the key run at once (0 holds them all).",
    )
    rate: RateSet | None = Field(default=None, description="A start rate (null: none).")
    note: str | None = NOTE


class KeyPublic(BaseModel):
    key: str
    declared_limit: int | None = Field(description="The limit its kind declared.")
    max_running: int | None = Field(description="An operator's limit, which wins.")
    running: int = Field(description="Jobs of the key running now.")
    rate: int | None = Field(description="Starts allowed per `per_seconds`.")
    per_seconds: float | None
    updated_by: str | None
    updated_at: datetime | None


class SchedulingPublic(BaseModel):
    """The settings in force: shares set by operators (every other owner has 1) and the
    concurrency keys known (named by a job, or set by an operator)."""

    owners: list[OwnerSharePublic]
    keys: list[KeyPublic]


class SchedulingChangePublic(BaseModel):
    seq: int
    at: datetime
    actor: str = Field(description="Who changed it (`operator:<owner>`).")
    setting: str = Field(description="`owner_share` or `concurrency_key`.")
    subject: str = Field(description="The owner or the key.")
    before: dict[str, Any] | None = Field(description="The values before (null: defaults).")
    after: dict[str, Any] | None
    note: str | None


class SchedulingChangesPublic(BaseModel):
    items: list[SchedulingChangePublic]
