"""A job's answers over HTTP: the status body with its validators and polling headers,
and a move's outcome as its answer (a refused move's problem comes from the one
mapping, :func:`~atlas_jobs._app.api.errors.problem_of`)."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import Response

from atlas_jobs._app.lifecycle import JobState, is_terminal
from atlas_jobs._app.services.actions import Moved
from atlas_jobs._app.services.schemas import JobPublic
from atlas_jobs._app.services.views import (
    JobRow,
    due_at,
    etag,
    retry_after_seconds,
    waiting_for,
    waiting_tag,
)


def status_headers(
    job: JobRow, *, now: datetime | None = None, public: JobPublic | None = None
) -> dict[str, str]:
    """ETag always; Retry-After while the job is not terminal (against ``now``, else the
    database time the row was read or written at). From the row, and from ``public``
    (the body sent with them) for what holds a queued job: the ETag names the body sent."""
    waiting = waiting_tag(public.waiting_for) if public is not None else None
    if public is None:
        waiting = waiting_tag(waiting_for(job))
    found = {"ETag": etag(job.version, waiting)}
    state = JobState(job.state)
    if not is_terminal(state):
        now = now or getattr(job, "observed_at", None) or datetime.now(UTC)
        found["Retry-After"] = str(retry_after_seconds(state, due_at(job), now))
    return found


def respond(moved: Moved, response: Response) -> JobPublic:
    """The status body of a move that took effect, its headers set on ``response`` (a
    replay: 200 with ``Idempotency-Replayed: true``)."""
    if moved.replayed:
        response.status_code = 200
        response.headers["Idempotency-Replayed"] = "true"
    response.headers.update(status_headers(moved.job, public=moved.public))
    return moved.public


def status_response(
    public: JobPublic, headers: dict[str, str], *, status_code: int = 200
) -> Response:
    """The status body serialized once, as the route's ``response_model`` would (by
    alias, nothing excluded), with ``headers``: FastAPI passes a ``Response`` through
    without validating and serializing the model again."""
    return Response(
        public.model_dump_json(by_alias=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )
