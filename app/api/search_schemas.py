"""The job filter of ``GET /v1/jobs`` (query parameters) and of bulk operations (a body
member): one model, so both accept and refuse the same things."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi.exceptions import RequestValidationError
from pydantic import AwareDatetime, BeforeValidator, Field, ValidationInfo, field_validator

from atlas_jobs._app.db.reads import JobFilter
from atlas_jobs._app.lifecycle import JobState, Reason
from atlas_jobs._app.services.paging import JOB_CURSOR, CursorMismatchError
from atlas_jobs._app.services.schemas import StrictModel
from atlas_jobs._app.tags import MAX_TAGS, Tag

MAX_VALUES = 20
"""At most this many values per filter field."""
MAX_PAGE = 100
CURSOR_PATTERN = JOB_CURSOR.pattern

Name = Annotated[str, Field(min_length=1, max_length=200)]
_RFC3339 = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")


def _rfc3339(value: Any) -> Any:
    """A time is an RFC 3339 string (``2026-12-01T09:00:00Z``), never a number of seconds."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("must be an RFC 3339 date-time with its zone")
    return value


Time = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]


class JobSearch(StrictModel):
    """Which jobs: every field given must match (a field's values are alternatives;
    tags must all be present). Time ranges are half-open, [after, before), with a time
    zone. An unknown field is 422."""

    state: list[JobState] = Field(
        default_factory=list, max_length=len(JobState), description="Any of these states."
    )
    kind: list[Name] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Any of these kinds."
    )
    owner: list[Name] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description=(
            "Any of these owners. Operators (and reviewers with the global review scope) "
            "search every owner; other keys only their own (another owner is 403)."
        ),
    )
    tag: list[Tag] = Field(
        default_factory=list,
        max_length=MAX_TAGS,
        description="Every one of these `key=value` tags.",
    )
    reason: list[Reason] = Field(
        default_factory=list, max_length=MAX_VALUES, description="Any of these reasons."
    )
    error_code: list[Name] = Field(
        default_factory=list,
        max_length=MAX_VALUES,
        description="The code of the job's error (or last error while unfinished).",
    )
    created_after: Time | None = Field(default=None, description="Created at or after.")
    created_before: Time | None = Field(default=None, description="Created before.")
    finished_after: Time | None = Field(default=None, description="Finished at or after.")
    finished_before: Time | None = Field(default=None, description="Finished before.")

    @field_validator("created_before", "finished_before")
    @classmethod
    def _range_ordered(cls, before: Any, info: ValidationInfo) -> Any:
        after = info.data.get(str(info.field_name).replace("_before", "_after"))
        if before is not None and after is not None and not after < before:
            raise ValueError(f"must be later than {str(info.field_name)[:-7]}_after")
        return before

    def to_filter(self, *, scope: str | None, limit: int = 20) -> JobFilter:
        """The filter as the reads take it, within ``scope`` (an owner, or ``None``)."""
        return JobFilter(
            owner=scope,
            states=[s.value for s in self.state],
            kinds=self.kind,
            owners=self.owner,
            tags=self.tag,
            reasons=[r.value for r in self.reason],
            error_codes=self.error_code,
            created_after=self.created_after,
            created_before=self.created_before,
            finished_after=self.finished_after,
            finished_before=self.finished_before,
            limit=limit,
        )


class JobListQuery(JobSearch):
    """A job search: a filter, and the page to read."""

    limit: int = Field(default=20, ge=1, le=MAX_PAGE, description="Jobs per page.")
    cursor: str | None = Field(
        default=None,
        pattern=CURSOR_PATTERN,
        description=(
            "next_cursor of the last page of the same search (opaque; a cursor of a "
            "search with other filters is 422)."
        ),
    )

    def page(self, *, scope: str | None) -> JobFilter:
        """The page to read within ``scope``: the filter continued after ``cursor``. The
        cursor of the other walk (one owner's by seq, across owners by id: it came from
        a search with other filters) is a 422 naming ``cursor``, like a malformed one."""
        try:
            return JOB_CURSOR.apply(self.to_filter(scope=scope, limit=self.limit), self.cursor)
        except CursorMismatchError as mismatch:
            located = {"type": "value_error", "loc": ("query", "cursor"), "msg": str(mismatch)}
            raise RequestValidationError([located]) from None
