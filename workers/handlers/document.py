"""``document.publish`` v1: extract (a unit per section) -> review gate -> publish.

* **extract** -- each section is checkpointed with its word count, so a retried attempt
  skips what an earlier one finished;
* **review** -- until a reviewer approves, the job waits (``waiting``, reason
  ``review``) with its deadline and rule; a rejection or a passed deadline ends it
  outside this handler (``reject``, ``deadline_fail``/``deadline_escalate``);
* **publish** -- one external operation (``atlas_jobs._workers.external``): stable operation id,
  reconciled before any repeat; an asynchronous destination answers 202 and the job
  waits for the signal that confirms it, then adopts the confirmed publication.

The engine then publishes the result reference (no files): where the document now
lives, under which operation id.
"""

from __future__ import annotations

from pydantic import ValidationError

from atlas_jobs._app.kinds.document import EXTRACT_SECONDS_PER_SECTION, DocumentInput
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import PermanentError
from atlas_jobs._workers.external import Operation
from atlas_jobs._workers.handlers.base import PublishPlan

PUBLICATIONS_PATH = "/publications"
REVIEW_UNIT = "decision"
PUBLISH_UNIT = "operation"


async def run(ctx: JobContext) -> PublishPlan:
    try:
        document = DocumentInput.model_validate(ctx.input)
    except ValidationError as exc:
        raise PermanentError(
            "invalid_input", "the input does not match document.publish v1 (or its destination)"
        ) from exc
    await ctx.load_checkpoints()
    await ctx.set_plan(
        [
            ("extract", "sections", len(document.sections)),
            ("review", "decisions", 1),
            ("publish", "operations", 1),
        ]
    )

    await ctx.enter_stage("extract")
    scale = ctx.settings.document_time_scale
    for index, section in enumerate(document.sections):
        unit = f"section-{index + 1}"
        if ctx.done("extract", unit):
            continue
        await ctx.safe_point()
        await ctx.sleep(EXTRACT_SECONDS_PER_SECTION * scale)
        await ctx.checkpoint("extract", unit, data={"words": len(section.text.split())})

    if not ctx.done("review", REVIEW_UNIT):
        await ctx.enter_stage("review")
        await ctx.safe_point()
        if not await ctx.review_approved():
            raise ctx.wait_for_review(
                deadline_seconds=document.deadline_seconds, on_deadline=document.deadline_rule
            )
        await ctx.checkpoint("review", REVIEW_UNIT)

    await ctx.enter_stage("publish")
    await ctx.safe_point()  # a cancel before the publication starts wins
    ctx.past_no_return = True  # from here on, publication settles; a late cancel loses
    receipt = await ctx.external.perform(
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
    if not ctx.done("publish", PUBLISH_UNIT):
        await ctx.checkpoint("publish", PUBLISH_UNIT)
    return PublishPlan(
        files=False,
        reference={
            "publication": {
                "destination": document.destination,
                "operation_id": str(receipt.operation_id),
                "settled": receipt.how,
                "receipt": dict(receipt.data),
            }
        },
    )
