"""Ending a wait from outside: a reviewer's decision, an external signal.

Both lose to the wait's deadline exactly as a cancel loses to a publication: the job
row is locked first (the lock order), and once the deadline has passed, the deadline's
rule is applied (``deadline_fail`` or ``deadline_escalate``), the late decision is
recorded in the history (``decision_too_late``, ``to`` = ``from``) and refused -- one
winner, whatever the sweeper has done yet. A signal is deduplicated by its event id:
the first outcome is kept in ``job_signals`` and answered again to every repeat.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db import reads
from atlas_jobs._app.db.external import (
    FIND_SIGNAL,
    LAST_DECISION,
    LATE_DECISION,
    LOCK_JOB,
    RECORD_SIGNAL,
)
from atlas_jobs._app.db.moves import Actor, Applied, MoveResult, Rejected, RejectReason
from atlas_jobs._app.lifecycle import JobState, Reason, TransitionName
from atlas_jobs._app.transitions.base import Approver, SameHandsRefused, Service
from atlas_jobs._app.transitions.maintenance import MaintenanceMoves
from atlas_jobs._app.transitions.requests import RequestMoves


@dataclass(frozen=True, slots=True)
class SignalOutcome:
    """A received signal: its record (the first outcome) and whether this was a repeat."""

    record: Row[Any]
    replayed: bool


class WaitMoves(Service):
    """Decisions and signals that end a wait, against its deadline: a review through
    ``requests``, the deadline's rule through ``maintenance``."""

    def __init__(self, requests: RequestMoves, maintenance: MaintenanceMoves) -> None:
        super().__init__(requests.executor)
        self.requests = requests
        self.maintenance = maintenance

    async def decide_review(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        approve: bool,
        actor: Actor,
        note: str | None = None,
        owner: str | None = None,
        four_eyes: Approver | None = None,
    ) -> MoveResult:
        """A reviewer's decision on a job waiting for review; after the deadline the
        deadline wins and the decision is recorded as too late.

        With ``four_eyes`` (``ATLAS_REVIEW_FOUR_EYES``), an approval of a job waiting for
        review by the hands that submitted it -- the same key, or any key of the same
        holder -- raises :class:`SameHandsRefused` (nothing is written); so does one by
        a key that names no holder (who approves must be known to differ)."""
        locked = await self._lock(conn, job_id, owner)
        if locked is None:
            return Rejected(
                TransitionName.APPROVE if approve else TransitionName.REJECT, RejectReason.NOT_FOUND
            )
        if (
            approve
            and four_eyes is not None
            and locked.state == JobState.WAITING
            and locked.reason == Reason.REVIEW
        ):
            submitter = await reads.submitter_of(conn, job_id)
            if four_eyes.holder is None:
                raise SameHandsRefused(None, holder_required=True)
            if submitter is not None and four_eyes.submitted(submitter):
                raise SameHandsRefused(submitter.holder)
        outcome = await self.requests.review(
            conn, job_id, approve=approve, actor=actor, note=note, owner=owner
        )
        if isinstance(outcome, Rejected) and _lost_to_deadline(locked, Reason.REVIEW):
            return await self._too_late(conn, outcome, actor=actor, event_id=None, note=note)
        if isinstance(outcome, Rejected) and outcome.reason == RejectReason.ILLEGAL:
            return await self._decided_before(conn, outcome)
        return outcome

    async def _decided_before(self, conn: AsyncConnection, refused: Rejected) -> Rejected:
        """A review of a job no longer waiting for one: the same decision that took effect
        before is a replay (:attr:`RejectReason.REPEATED`), another one conflicts with it
        (:attr:`RejectReason.CONFLICTING`); a job never decided stays plainly refused."""
        if refused.job is None:
            return refused
        recorded = (
            await conn.execute(LAST_DECISION, {"job_id": refused.job.id})
        ).scalar_one_or_none()
        if recorded is None:
            return refused
        reason = (
            RejectReason.REPEATED if recorded == refused.transition else RejectReason.CONFLICTING
        )
        return Rejected(refused.transition, reason, refused.current, refused.job)

    async def signal(
        self,
        conn: AsyncConnection,
        job_id: uuid.UUID,
        *,
        event_id: str,
        actor: Actor,
        data: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> SignalOutcome | Rejected:
        """An external event for a job waiting with reason ``external``. A repeated
        event id answers the first outcome; a job not waiting for one is refused."""
        locked = await self._lock(conn, job_id, owner)
        if locked is None:
            return Rejected(TransitionName.RECEIVE_EVENT, RejectReason.NOT_FOUND)
        found = (await conn.execute(FIND_SIGNAL, {"job_id": job_id, "event_id": event_id})).first()
        if found is not None:
            return SignalOutcome(found, replayed=True)
        outcome = await self.requests.receive_event(
            conn, job_id, event_id=event_id, actor=actor, data={"event_id": event_id}
        )
        if isinstance(outcome, Rejected):
            if _lost_to_deadline(locked, Reason.EXTERNAL):
                return await self._too_late(conn, outcome, actor=actor, event_id=event_id)
            return outcome
        record = (
            await conn.execute(
                RECORD_SIGNAL,
                {
                    "job_id": job_id,
                    "event_id": event_id,
                    "actor": str(actor),
                    "data": json.dumps(data) if data is not None else None,
                    "outcome": json.dumps(
                        {"state": outcome.to_state.value, "reason": outcome.job.reason}
                    ),
                    **self.clock.bind(),
                },
            )
        ).one()
        return SignalOutcome(record, replayed=False)

    async def _lock(
        self, conn: AsyncConnection, job_id: uuid.UUID, owner: str | None
    ) -> Row[Any] | None:
        return (
            await conn.execute(LOCK_JOB, {"job_id": job_id, "owner": owner, **self.clock.bind()})
        ).first()

    async def _too_late(
        self,
        conn: AsyncConnection,
        refused: Rejected,
        *,
        actor: Actor,
        event_id: str | None,
        note: str | None = None,
    ) -> Rejected:
        """The deadline won: apply its rule now, record the loser, refuse it."""
        if refused.job is None:
            return refused
        job_id = refused.job.id
        passed = await self.maintenance.pass_deadline(conn, job_id)
        row = passed.job if isinstance(passed, Applied) else refused.job
        await conn.execute(
            LATE_DECISION,
            {
                "job_id": job_id,
                "transition": refused.transition,
                "state": row.state,
                "actor": str(actor),
                "event_id": event_id,
                "note": note or "arrived after the wait's deadline",
                **self.clock.bind(),
            },
        )
        return Rejected(refused.transition, RejectReason.ILLEGAL, JobState(row.state), row)


def _lost_to_deadline(locked: Row[Any], waited_for: Reason) -> bool:
    """The wait this decision was for ended (or ends now) by its deadline."""
    if locked.reason in {Reason.DEADLINE_PASSED, Reason.DEADLINE_ESCALATED}:
        return True
    return bool(locked.deadline_passed) and locked.reason == waited_for
