"""Request and response models of ``/v1/scheduling`` (operators' shares and key limits)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, StrictInt

from atlas_jobs._app.fairness import MAX_KEY_LIMIT, MAX_SHARE
from atlas_jobs._app.services.schemas import RateSet, StrictModel

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
    """An owner's share of the fair share, as an operator set it."""

    owner: str = Field(description="The owner whose lanes the share weighs.")
    share: int = Field(description="The owner's weight in the fair share (the default is 1).")
    updated_by: str = Field(description="The operator who set it.")
    updated_at: datetime = Field(description="When it was last set.")


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
    """A concurrency key: its limits, its start rate and how many of its jobs run now."""

    key: str = Field(
        description="The concurrency key: a kind's key, or a job's key under it "
        "(`press/customer-7`)."
    )
    declared_limit: int | None = Field(description="The limit its kind declared.")
    declared_rate: RateSet | None = Field(
        default=None,
        description="The start rate its kind declared (null: none). It is in force until an "
        "operator sets one, and again once the operator's is cleared.",
    )
    max_running: int | None = Field(description="An operator's limit, which wins.")
    running: int = Field(description="Jobs of the key running now.")
    rate: int | None = Field(
        description="Starts allowed per `per_seconds`: the rate in force, an operator's or "
        "else the declared one."
    )
    per_seconds: float | None = Field(
        description="The period of the start rate, in seconds (null: no rate)."
    )
    updated_by: str | None = Field(
        description="The operator who last set it (null: no operator has)."
    )
    updated_at: datetime | None = Field(
        description="When an operator last set it (null: no operator has)."
    )


class SchedulingPublic(BaseModel):
    """The settings in force: shares set by operators (every other owner has 1) and the
    concurrency keys known (named by a job, or set by an operator)."""

    owners: list[OwnerSharePublic] = Field(
        description="The shares operators set, by owner; every other owner has share 1."
    )
    keys: list[KeyPublic] = Field(description="The concurrency keys known, by key.")


class SchedulingChangePublic(BaseModel):
    """One operator's change of a share or a concurrency key, as recorded."""

    seq: int = Field(description="The change's number: a later change has a higher one.")
    at: datetime = Field(description="When the change was made.")
    actor: str = Field(description="Who changed it (`operator:<owner>`).")
    setting: str = Field(description="`owner_share` or `concurrency_key`.")
    subject: str = Field(description="The owner or the key.")
    before: dict[str, Any] | None = Field(description="The values before (null: defaults).")
    after: dict[str, Any] | None = Field(description="The values set by the change.")
    note: str | None = Field(description="Why, as the operator said (null: no note).")


class SchedulingChangesPublic(BaseModel):
    """The operators' changes of shares and concurrency keys."""

    items: list[SchedulingChangePublic] = Field(description="The latest 100 changes, newest first.")
