"""Jobs in every state for migration tests, written with plain SQL that any revision's
``jobs`` accepts: the product's own statements (creation, claim) follow the head
schema and cannot run on an older one. Each row fits the lifecycle's row rules."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import JobState

# state -> (reason, extra columns and their values); the rules: an attempt and a lease
# while active, a finish time when terminal, an error when failed, a result when
# succeeded, a deadline and its rule while waiting.
_SHAPES: dict[JobState, tuple[str, dict[str, str]]] = {
    JobState.QUEUED: ("new", {}),
    JobState.RUNNING: (
        "claimed",
        {
            "current_attempt_id": "gen_random_uuid()",
            "lease_expires_at": "now() + interval '1 minute'",
            "attempt": "1",
            "charged_attempts": "1",
        },
    ),
    JobState.CANCEL_REQUESTED: (
        "cancel_requested",
        {
            "current_attempt_id": "gen_random_uuid()",
            "lease_expires_at": "now() + interval '1 minute'",
            "attempt": "1",
            "charged_attempts": "1",
        },
    ),
    JobState.WAITING: (
        "external",
        {
            "wait_deadline_at": "now() + interval '1 hour'",
            "wait_on_deadline": "'fail'",
            "attempt": "1",
            "charged_attempts": "1",
        },
    ),
    JobState.UNRESOLVED: ("retries_exhausted", {"attempt": "1", "charged_attempts": "1"}),
    JobState.SUCCEEDED: (
        "published",
        {
            "finished_at": "now()",
            "delivery_state": "'available'",
            "result_ref": "'{}'::jsonb",
            "delivery_expires_at": "now() + interval '1 day'",
            "attempt": "1",
            "charged_attempts": "1",
        },
    ),
    JobState.FAILED: (
        "error",
        {
            "finished_at": "now()",
            "error": '\'{"code": "x"}\'::jsonb',
            "attempt": "1",
            "charged_attempts": "1",
        },
    ),
    JobState.CANCELED: ("canceled", {"finished_at": "now()"}),
}


class RawJobs:
    """``make(state, owner=...)``: one job in ``state``, as :class:`tests.factory.JobFactory`
    makes them, but by one INSERT."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def make(
        self, state: JobState = JobState.QUEUED, *, owner: str = "alice", **_: Any
    ) -> uuid.UUID:
        reason, extra = _SHAPES[state]
        columns = ", ".join(extra)
        values = ", ".join(extra.values())
        job_id = uuid.uuid4()
        sql = (
            "INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,"
            f" max_elapsed_seconds{', ' + columns if columns else ''})"
            f" VALUES (:id, :owner, 'test.kind', 1, '{{}}', :state, :reason, 3, 3600"
            f"{', ' + values if values else ''})"
        )
        async with self.engine.begin() as conn:
            await conn.execute(
                text(sql), {"id": job_id, "owner": owner, "state": state.value, "reason": reason}
            )
            # Its history as the rollup and the history readers see it: the creation, and
            # the move into its state.
            await conn.execute(
                _HISTORY, {"id": job_id, "to": "queued", "from": None, "reason": "new"}
            )
            if state != JobState.QUEUED:
                await conn.execute(
                    _HISTORY, {"id": job_id, "to": state.value, "from": "queued", "reason": reason}
                )
        return job_id


_HISTORY = text("""
INSERT INTO job_history (job_id, transition, from_state, to_state, reason, actor)
VALUES (:id, 'test', CAST(:from AS text), :to, :reason, 'test:rows')
""")
