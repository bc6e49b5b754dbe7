"""``atlas.noop`` v1: validates its input and succeeds with an empty result."""

from __future__ import annotations

from pydantic import ValidationError

from atlas_jobs._app.kinds.noop import NoopInput
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import PermanentError
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan


async def run(ctx: JobContext) -> PublishPlan:
    try:
        NoopInput.model_validate(ctx.input)
    except ValidationError as exc:
        raise PermanentError("invalid_input", "the input does not match atlas.noop v1") from exc
    return NO_FILES
