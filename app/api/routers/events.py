"""``GET /v1/jobs/{id}/events``: Server-Sent Events of transitions and progress.

Each history row is an event ``transition`` whose ``id`` is the history ``seq``, so a
client that reconnects with ``Last-Event-ID`` resumes exactly after what it saw. A
version change with no new history row (progress, heartbeat-free bookkeeping) is an
event ``progress`` carrying the status body, without an id. The stream ends once the
job is terminal and its delivery settled. Woken by LISTEN/NOTIFY; a comment line every
``KEEPALIVE_SECONDS`` keeps proxies from closing an idle stream.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from app.api.deps import CurrentPrincipal, StateDep, bind_job, visible_owner
from app.api.errors import JobNotFoundError
from app.api.responses import problems
from app.api.state import ApiState
from app.api.views import history_item, job_status
from app.db import reads
from app.lifecycle import DeliveryState, JobState, is_terminal

router = APIRouter(prefix="/v1/jobs", tags=["events"])

KEEPALIVE_SECONDS = 15.0
SSE_EVENT_SCHEMA = {
    "type": "object",
    "description": "One event: `transition` carries a HistoryItem as JSON in `data` "
    "(`id` = its seq); `progress` carries the JobPublic status as JSON.",
    "properties": {
        "event": {"type": "string", "enum": ["transition", "progress"]},
        "id": {"type": "string"},
        "data": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
UNSETTLED = frozenset({DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE})


def _frame(event: str, data: str, event_id: int | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


def _last_event_id(value: str | None) -> int:
    """The history seq to resume after; anything unusable restarts from the beginning."""
    try:
        seq = int(value) if value else 0
    except ValueError:
        return 0
    return seq if 0 <= seq < 2**63 else 0


async def _stream(
    state: ApiState, job_id: uuid.UUID, owner: str | None, after_seq: int
) -> AsyncIterator[bytes]:
    seen_version: int | None = None
    yield b"retry: 2000\n\n"
    async with state.notifier.subscribe(job_id) as changes:
        while True:
            async with state.engine.connect() as conn:
                job = await reads.get_job(conn, job_id, owner=owner)
                if job is None:
                    return
                rows = await reads.history(conn, job_id, after_seq=after_seq)
                stages = (await reads.stages_for(conn, [job_id]))[job_id]
            for row in rows:
                after_seq = row.seq
                item = history_item(row).model_dump_json(by_alias=True)
                yield _frame("transition", item, row.seq)
            if not rows and seen_version is not None and job.version != seen_version:
                yield _frame("progress", job_status(job, stages).model_dump_json())
            seen_version = job.version
            done = is_terminal(JobState(job.state)) and (
                DeliveryState(job.delivery_state) not in UNSETTLED
            )
            if done:
                return
            if not await changes.wait(KEEPALIVE_SECONDS):
                yield b": keepalive\n\n"


@router.get(
    "/{job_id}/events",
    name="stream",
    summary="Stream a job's transitions and progress (SSE)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "text/event-stream; events `transition` (id = history seq) and "
            "`progress` (the status body). Ends when the job is terminal.",
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
        },
        **problems(404, 422),
    },
)
async def stream(
    job_id: uuid.UUID,
    state: StateDep,
    principal: CurrentPrincipal,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", max_length=32, description="Resume after this seq."),
    ] = None,
) -> StreamingResponse:
    bind_job(job_id)
    owner = visible_owner(principal)
    async with state.engine.connect() as conn:
        if await reads.get_job(conn, job_id, owner=owner) is None:
            raise JobNotFoundError()
    return StreamingResponse(
        _stream(state, job_id, owner, _last_event_id(last_event_id)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


__all__ = ["router"]
