"""``atlas.noop`` v1: validates its input and succeeds with an empty result."""

from __future__ import annotations

from pydantic import ValidationError

from app.kinds.noop import NoopInput
from workers.context import JobContext
from workers.errors import PermanentError
from workers.handlers.base import NO_FILES, PublishPlan


async def run(ctx: JobContext) -> PublishPlan:
    try:
        NoopInput.model_validate(ctx.input)
    except ValidationError as exc:
        raise PermanentError("invalid_input", "the input does not match atlas.noop v1") from exc
    return NO_FILES
