"""``document.publish`` (the second reference kind): extract -> review -> publish.

Written on the public API alone, as an example of a kind with a business wait and an
external side effect. The input is a small structured document and the *name* of a
configured destination (never a URL):

* **extract** -- each section is recorded done with its word count, so a retried attempt
  skips what an earlier one finished;
* **review** -- until a reviewer approves, the job waits (``waiting``, reason ``review``)
  with its deadline -- the kind's, or the job's own within bounds -- and its rule; a
  rejection or a passed deadline ends it outside this handler;
* **publish** -- one external operation (:meth:`atlas_jobs.Context.perform`): a stable
  operation id, reconciled before any repeat; a destination that answers 202 makes the
  job wait for the signal that confirms it.

The result reference says where the document now lives, under which operation id, and
the destination's receipt.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atlas_jobs import Context, DestinationName, Operation, Result, RetryPolicy, Stage, kind

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
    destination: DestinationName
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


PUBLICATIONS_PATH = "/publications"
REVIEW_UNIT = "decision"
PUBLISH_UNIT = "operation"
TIME_SCALE_VARIABLE = "ATLAS_DOCUMENT_TIME_SCALE"


class Publication(BaseModel):
    """Where a published document lives."""

    destination: str = Field(description="The configured destination it was published to.")
    operation_id: str = Field(description="The operation's id (its Idempotency-Key there).")
    settled: str = Field(description="`confirmed` by the answer, or `adopted` from a lookup.")
    receipt: dict[str, Any] = Field(description="What the destination answered (bounded).")


class DocumentResult(BaseModel):
    """The result reference of ``document.publish``."""

    publication: Publication


@kind(
    "document.publish",
    version=1,
    input=DocumentInput,
    result=DocumentResult,
    description=(
        "Extracts a document's sections, waits for a reviewer, then publishes it to a "
        "configured destination (reconciled before any repeat)."
    ),
    stages=[
        Stage("extract", "sections"),
        Stage("review", "decisions"),
        Stage("publish", "operations"),
    ],
    retry=RetryPolicy(
        attempts=5,
        max_elapsed_seconds=7 * 86_400 + 3600,
        backoff_base_seconds=0.5,
        backoff_cap_seconds=30,
    ),
    timeout=300,
)
async def publish_document(ctx: Context[DocumentInput]) -> Result:
    document = ctx.input
    await ctx.plan(extract=len(document.sections), review=1, publish=1)

    await ctx.enter("extract")
    scale = float(os.environ.get(TIME_SCALE_VARIABLE) or 1.0)
    for index, section in enumerate(document.sections):
        unit = f"section-{index + 1}"
        if ctx.is_done("extract", unit):
            continue
        await ctx.safe_point()
        await ctx.sleep(EXTRACT_SECONDS_PER_SECTION * scale)
        await ctx.unit_done("extract", unit, data={"words": len(section.text.split())})

    if not ctx.is_done("review", REVIEW_UNIT):
        await ctx.enter("review")
        await ctx.safe_point()
        await ctx.review(
            deadline_seconds=document.deadline_seconds, on_deadline=document.deadline_rule
        )
        await ctx.unit_done("review", REVIEW_UNIT)

    await ctx.safe_point()  # a cancel before the publication starts wins
    await ctx.begin_publication()  # from here on, publication settles; a late cancel loses
    receipt = await ctx.perform(
        Operation(
            step="publish",
            destination=document.destination,
            path=PUBLICATIONS_PATH,
            body={
                "job_id": str(ctx.job_id),
                "title": document.title,
                "sections": [s.model_dump() for s in document.sections],
            },
        )
    )
    if not ctx.is_done("publish", PUBLISH_UNIT):
        await ctx.unit_done("publish", PUBLISH_UNIT)
    return Result(
        reference=DocumentResult(
            publication=Publication(
                destination=document.destination,
                operation_id=str(receipt.operation_id),
                settled=receipt.how,
                receipt=dict(receipt.data),
            )
        )
    )
