"""Reading a job for an HTTP answer: status body, validators and polling headers."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.api.errors import JobNotFoundError
from app.api.schemas import JobPublic
from app.api.views import etag, job_status, retry_after_seconds
from app.db import reads
from app.lifecycle import JobState, is_terminal


async def read_status(
    conn: AsyncConnection, job_id: uuid.UUID, *, owner: str | None
) -> tuple[Any, JobPublic]:
    """The job row and its status body; 404 for unknown *and* for not-yours."""
    job = await reads.get_job(conn, job_id, owner=owner)
    if job is None:
        raise JobNotFoundError()
    stages = (await reads.stages_for(conn, [job.id]))[job.id]
    return job, job_status(job, stages)


async def read_status_once(
    engine: AsyncEngine, job_id: uuid.UUID, *, owner: str | None
) -> tuple[Any, JobPublic]:
    """Like :func:`read_status` on a short-lived connection (nothing held while waiting)."""
    async with engine.connect() as conn:
        return await read_status(conn, job_id, owner=owner)


def status_headers(job: Any, status: JobPublic) -> dict[str, str]:
    """ETag always; Retry-After while the job is not terminal."""
    found = {"ETag": etag(job.version)}
    state = JobState(job.state)
    if not is_terminal(state):
        seconds = retry_after_seconds(state, status.next_attempt_at, datetime.now(UTC))
        found["Retry-After"] = str(seconds)
    return found
