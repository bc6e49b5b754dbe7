"""``document.publish`` (the second reference kind): accept -> extract -> review -> publish.

The input is a small structured document and the *name* of a configured destination
(never a URL). Extraction is checkpointed per section; the review gate makes the job
``waiting`` (reason ``review``) with a deadline -- the kind's, or the job's own within
bounds -- and a rule for when it passes; publication is an external operation with a
stable operation id, reconciled before any repeat (``atlas_jobs._workers.external``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from atlas_jobs._app.destinations import DESTINATION_NAME, destination_names

MAX_SECTIONS = 50
MAX_SECTION_CHARS = 20_000
MAX_DOCUMENT_CHARS = 200_000
REVIEW_DEADLINE_SECONDS = 86_400
"""The kind's review deadline: a day."""
REVIEW_DEADLINE_BOUNDS = (1, 7 * 86_400)
"""A job may choose its own review deadline within these bounds (seconds)."""
REVIEW_DEADLINE_RULE: Literal["fail", "escalate"] = "fail"
"""The kind's rule when the review deadline passes: ``failed`` (``deadline_passed``)."""
EXTRACT_SECONDS_PER_SECTION = 0.2
"""Simulated extraction cost at time scale 1.0 (``ATLAS_DOCUMENT_TIME_SCALE``)."""


class Section(BaseModel):
    """One section of a document: a heading and its text (extracted one by one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    heading: str = Field(min_length=1, max_length=200, description="The section's heading.")
    text: str = Field(
        min_length=1, max_length=MAX_SECTION_CHARS, description="The section's text (plain)."
    )


class DocumentInput(BaseModel):
    """Input of ``document.publish``: a title, sections, and where to publish."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=1, max_length=200, description="The document's title.")
    sections: list[Section] = Field(
        min_length=1,
        max_length=MAX_SECTIONS,
        description="The document's body, in order (progress is counted in sections).",
    )
    destination: str = Field(
        pattern=DESTINATION_NAME,
        description="The name of a configured destination (ATLAS_DESTINATIONS), never a URL.",
    )
    review_deadline_seconds: int | None = Field(
        default=None,
        ge=REVIEW_DEADLINE_BOUNDS[0],
        le=REVIEW_DEADLINE_BOUNDS[1],
        description="This job's review deadline (default: the kind's, a day).",
    )
    on_review_deadline: Literal["fail", "escalate"] | None = Field(
        default=None,
        description="What the passed review deadline does (default: the kind's rule, fail).",
    )

    @field_validator("destination")
    @classmethod
    def _allowed(cls, name: str) -> str:
        from atlas_jobs._app.settings import get_settings

        allowed = get_settings().destinations
        if name not in allowed:
            raise ValueError(f"unknown destination; configured: {destination_names(allowed)}")
        return name

    @model_validator(mode="after")
    def _bounded(self) -> DocumentInput:
        if sum(len(s.text) for s in self.sections) > MAX_DOCUMENT_CHARS:
            raise ValueError(f"the sections hold more than {MAX_DOCUMENT_CHARS} characters")
        return self

    @property
    def deadline_seconds(self) -> int:
        return self.review_deadline_seconds or REVIEW_DEADLINE_SECONDS

    @property
    def deadline_rule(self) -> Literal["fail", "escalate"]:
        return self.on_review_deadline or REVIEW_DEADLINE_RULE
