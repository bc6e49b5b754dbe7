"""The lease holder's record of an external operation: one ``record_operation`` move
(a fenced history entry whose ``data`` is the outcome) and the operation's row, in one
transaction. Only the attempt that holds the job can write either."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db.external import UPSERT_OPERATION
from atlas_jobs._app.db.moves import Actor, Applied, MoveResult, Step
from atlas_jobs._app.lifecycle import OPERATION_RECORDED, TRANSITIONS, TransitionName
from atlas_jobs._app.transitions.base import Service


@dataclass(frozen=True, slots=True)
class OperationEntry:
    """One outcome of an external operation, as recorded.

    ``outcome`` is what happened (``attempted``, ``confirmed``, ``uncertain``,
    ``applied_found``, ``not_applied_found``, ``undecided``, ``adopted``, ``refused``,
    ``not_sent``, ``awaiting_confirmation``); ``state`` the operation's state after it.
    Never a payload or a secret: ids, HTTP status and an exception's class only."""

    operation_id: uuid.UUID
    step: str
    destination: str
    outcome: str
    state: str
    http_status: int | None = None
    error_class: str | None = None
    receipt: Mapping[str, Any] | None = None
    sends: int = 0
    checks: int = 0

    def history_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "operation_id": str(self.operation_id),
            "step": self.step,
            "destination": self.destination,
            "outcome": self.outcome,
        }
        if self.http_status is not None:
            data["http_status"] = self.http_status
        if self.error_class is not None:
            data["error_class"] = self.error_class
        return data


class OperationMoves(Service):
    async def record_operation(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        attempt_id: uuid.UUID,
        entry: OperationEntry,
        *,
        actor: Actor,
    ) -> MoveResult:
        """Append the entry to the job's history (fenced) and update the operation's row."""
        outcome = await self.executor.apply_one(
            conn,
            TRANSITIONS[TransitionName.RECORD_OPERATION],
            Step(
                job_id,
                attempt_id=attempt_id,
                data=entry.history_data(),
                event_id=str(entry.operation_id),
                note=f"{OPERATION_RECORDED}: {entry.step} {entry.outcome}",
            ),
            actor=actor,
        )
        if isinstance(outcome, Applied):
            await conn.execute(
                UPSERT_OPERATION,
                {
                    "id": entry.operation_id,
                    "job_id": job_id,
                    "step": entry.step,
                    "destination": entry.destination,
                    "state": entry.state,
                    "sends": entry.sends,
                    "checks": entry.checks,
                    "http_status": entry.http_status,
                    "error_class": entry.error_class,
                    "receipt": None if entry.receipt is None else json.dumps(dict(entry.receipt)),
                    **self.clock.bind(),
                },
            )
        return outcome
