"""The handler interface: an async function of a :class:`~atlas_jobs._workers.context.JobContext`
that does the work and says how to publish it. The engine does the publication."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from atlas_jobs._workers.context import JobContext


@dataclass(frozen=True, slots=True)
class PublishPlan:
    """How the engine publishes a finished job.

    ``files``: move the private staging area into the owner's result area (else the
    result reference lists no files). ``hold_seconds``: simulated publication cost, spent
    while the job row is locked, so a cancel arriving meanwhile loses. ``announce``:
    enter the ``publish`` stage first so readers see "Publishing". ``reference``:
    further fields of the result reference (e.g. where an external publication lives).
    """

    files: bool
    hold_seconds: float = 0.0
    announce: bool = False
    reference: Mapping[str, Any] | None = None


NO_FILES = PublishPlan(files=False)

Handler = Callable[[JobContext], Awaitable[PublishPlan]]
