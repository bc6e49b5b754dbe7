"""Request and response models of ``/v1/bulk-operations`` (an operator's action over
many jobs, as a resource of its own)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from atlas_jobs._app.api.search_schemas import JobSearch
from atlas_jobs._app.lifecycle import BulkAction, BulkOperationState
from atlas_jobs._app.services.schemas import ErrorPublic, JobPublic, StrictModel

MAX_IDS = 10_000
SAMPLE_SIZE = 10
COUNT_CAP = 100_000
"""A dry run counts at most this many matches (``matched_capped`` says it stopped)."""


def _one_of_filter_and_ids(schema: dict[str, Any]) -> None:
    """The document says what the validation does: `filter` or `job_ids`, exactly one, and
    when given, not null (the models accept an absent member as None: a nullable union
    would name its branches in a 422's `loc`)."""
    for name in ("filter", "job_ids", "note"):
        member = schema["properties"][name]
        member.pop("default", None)
        [given] = [option for option in member.pop("anyOf") if option.get("type") != "null"]
        member.update(given)
    schema["oneOf"] = [{"required": ["filter"]}, {"required": ["job_ids"]}]


class BulkOperationCreate(StrictModel):
    """What to do, to which jobs: exactly one of `filter` and `job_ids`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of_filter_and_ids)

    action: BulkAction = Field(
        description=(
            "`cancel` (queued, waiting, running, unresolved jobs), `resume` and `fail` "
            "(unresolved jobs), `replay` (terminal jobs, each once: a new job)."
        )
    )
    filter: JobSearch | None = Field(
        default=None,
        description=(
            "The jobs `GET /v1/jobs` would list with these filters (any owner), as they "
            "are when the operation is accepted: jobs created later are not included."
        ),
    )
    job_ids: Annotated[list[uuid.UUID], Field(min_length=1, max_length=MAX_IDS)] | None = Field(
        default=None, description="These jobs."
    )
    note: Annotated[str, Field(max_length=2000)] | None = Field(
        default=None, description="Why; recorded in every touched job's history."
    )
    dry_run: bool = Field(
        default=False,
        description="Only count the matching jobs and show a sample; nothing is created.",
    )

    @field_validator("filter", "job_ids", "note", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("leave it out rather than send null")
        return value

    @model_validator(mode="after")
    def _one_selection(self) -> BulkOperationCreate:
        if (self.filter is None) == (self.job_ids is None):
            raise ValueError("give exactly one of filter and job_ids")
        return self


class BulkCountsPublic(BaseModel):
    """What the operation has selected and done so far."""

    matched: int = Field(description="Jobs selected so far (all of them once it has ended).")
    done: int = Field(description="Jobs the action was applied to.")
    skipped: int = Field(description="Jobs passed over, untouched (see `skipped_by_reason`).")
    skipped_by_reason: dict[str, int] = Field(
        description=(
            "Why: `already_ended`, `already_canceling`, `already_replayed`, "
            "`not_allowed_in_state:<state>`, `outside_scope` (a kind the key may not act "
            "on), `not_found`."
        )
    )


class BulkOperationLinks(BaseModel):
    """Where to go next."""

    self: str = Field(description="This operation (the `Location` of its creation).")
    events: str = Field(description="Its Server-Sent Events stream.")
    cancel: str | None = Field(description="Present while it can be canceled.")
    jobs: str | None = Field(
        description="The search of its filter (`GET /v1/jobs?...`), for a filter."
    )


class BulkOperationPublic(BaseModel):
    """A bulk operation: its action, selection, state and counts."""

    id: uuid.UUID = Field(description="The operation's id.")
    action: BulkAction = Field(description="What it does to each job.")
    state: BulkOperationState = Field(
        description="`queued` -> `running` -> `succeeded` | `failed` | `canceled`."
    )
    filter: JobSearch | None = Field(description="The filter it selects jobs by, if any.")
    job_count: int | None = Field(description="How many ids it was given, for an id list.")
    note: str | None = Field(description="Why, as the operator said (in every job's history).")
    requested_by: str = Field(description="The operator (`operator:<owner>`).")
    kinds: list[str] | None = Field(
        description="The kinds the requesting key may act on (null: every kind)."
    )
    counts: BulkCountsPublic = Field(description="Matched, done and skipped jobs so far.")
    error: ErrorPublic | None = Field(description="Why it failed, when it did.")
    created_at: datetime = Field(description="When it was accepted.")
    started_at: datetime | None = Field(description="When a worker first took it.")
    finished_at: datetime | None = Field(description="When it ended.")
    cancel_requested_at: datetime | None = Field(description="When an operator canceled it.")
    links: BulkOperationLinks = Field(description="Its status, event stream, cancel and jobs.")


class BulkOperationPreview(BaseModel):
    """A dry run's answer: nothing was created."""

    action: BulkAction = Field(description="What the operation would do.")
    matched: int = Field(description="Jobs the selection matches now (at most the cap).")
    matched_capped: bool = Field(description=f"Counting stopped at {COUNT_CAP:,}.")
    sample: list[JobPublic] = Field(description=f"The newest of them, at most {SAMPLE_SIZE}.")


class BulkOperationPage(BaseModel):
    """Bulk operations, newest first."""

    items: list[BulkOperationPublic] = Field(description="The operations of this page.")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page.")


def search_document(stored: dict[str, Any]) -> JobSearch:
    """The stored filter (``atlas_jobs._app.db.bulk.filter_document``) as the public model."""
    return JobSearch.model_validate(
        {
            "state": stored.get("states", []),
            "kind": stored.get("kinds", []),
            "owner": stored.get("owners", []),
            "tag": stored.get("tags", []),
            "reason": stored.get("reasons", []),
            "error_code": stored.get("error_codes", []),
            "created_after": stored.get("created_after"),
            "created_before": stored.get("created_before"),
            "finished_after": stored.get("finished_after"),
            "finished_before": stored.get("finished_before"),
        }
    )
