"""Bulk operations' batches: an operator's action applied to a batch of matched jobs,
through the transition table and the one executor, in ONE transaction with the
operation's progress.

A batch (:meth:`BulkBatches.run_batch`) locks the operation row while its worker holds
the lease, reads the next jobs (a filter's, oldest first: across owners by id, after
``after_id`` and at most ``through_id``; one owner's by seq, after ``position`` and at most
``through_seq``; or the next slice of the id list), and for each job decides from the
lifecycle's :data:`~atlas_jobs._app.lifecycle.BULK_MOVES` which named transition applies
from its state -- or why the job is skipped (:func:`~atlas_jobs._app.lifecycle.bulk_skip`,
a kind outside the key's scope). The moves are compare-and-sets: a job that moved since
it was read (another operation, a worker) is refused and looked at again in its new
state, so two operations over the same jobs act on each job once, and the second counts
it skipped. Every move's history row names the operation (``data.bulk_operation``) and
its actor the operator. The counts and the new position are written by the same
transaction: a crash loses only the batch in flight, which is redone whole.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.db import bulk
from atlas_jobs._app.db.moves import Actor, Applied, Step
from atlas_jobs._app.db.reads import walks_by_id
from atlas_jobs._app.lifecycle import (
    BULK_MOVES,
    TERMINAL_STATES,
    TRANSITIONS,
    ActorKind,
    BulkAction,
    BulkOperationState,
    BulkSkip,
    JobState,
    TransitionName,
    bulk_skip,
    not_allowed_in,
)
from atlas_jobs._app.transitions.base import NewJob, error_doc
from atlas_jobs._app.transitions.requests import RequestMoves

_ROUNDS = 2
"""A job refused because it moved since it was read is looked at once more, in the state
it moved to (a running job that became unresolved is then canceled by operator_cancel)."""


def operator_of(requested_by: str, key_id: uuid.UUID | None) -> Actor:
    kind, _, name = requested_by.partition(":")
    return Actor(ActorKind(kind), name, key_id=key_id)


@dataclass(frozen=True, slots=True)
class _Tally:
    done: int
    skipped: Mapping[str, int]


class BulkBatches:
    """Claims bulk operations and runs their batches; callers own each transaction."""

    def __init__(
        self,
        transitions: RequestMoves,
        *,
        worker_id: str,
        batch_size: int,
        lease_seconds: float,
    ) -> None:
        self.transitions = transitions
        self.worker_id = worker_id
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds

    async def claim(self, conn: AsyncConnection) -> Row[Any] | None:
        """The oldest operation no live lease holds, now held by this worker."""
        return (
            await conn.execute(
                bulk.CLAIM,
                {
                    "worker_id": self.worker_id,
                    "lease_seconds": self.lease_seconds,
                    **self.transitions.clock.bind(),
                },
            )
        ).first()

    async def run_batch(self, conn: AsyncConnection, operation_id: uuid.UUID) -> Row[Any] | None:
        """One batch of the operation; its row afterwards, or ``None`` when this worker
        no longer holds it (nothing was done)."""
        op = (
            await conn.execute(bulk.LOCK_HELD, {"id": operation_id, "worker_id": self.worker_id})
        ).first()
        if op is None:
            return None
        if op.cancel_requested_at is not None:
            return await self._progress(
                conn,
                op,
                position=op.position,
                matched=0,
                tally=_Tally(0, {}),
                finish=BulkOperationState.CANCELED,
            )
        action = BulkAction(op.action)
        found: dict[uuid.UUID, Row[Any]]
        missing = 0
        after_id: uuid.UUID | None = None
        if op.filter is not None:
            page = bulk.stored_filter(op.filter)
            rows = await bulk.filter_batch(conn, page, op, limit=self.batch_size)
            found = {row.id: row for row in rows}
            matched = len(rows)
            position = op.position
            if rows and walks_by_id(page):
                after_id = rows[-1].id
            elif rows:
                position = rows[-1].seq
            last = len(rows) < self.batch_size
        else:
            wanted = list(op.job_ids[op.position : op.position + self.batch_size])
            found = await bulk.jobs_by_id(conn, wanted)
            missing = len(wanted) - len(found)
            matched = len(wanted)
            position = op.position + len(wanted)
            last = position >= len(op.job_ids)
        tally = await self._act(conn, op, action, list(found.values()))
        skipped = Counter(tally.skipped)
        if missing:
            skipped[BulkSkip.NOT_FOUND.value] += missing
        return await self._progress(
            conn,
            op,
            position=position,
            after_id=after_id,
            matched=matched,
            tally=_Tally(tally.done, skipped),
            finish=BulkOperationState.SUCCEEDED if last else None,
        )

    async def fail(self, conn: AsyncConnection, operation_id: uuid.UUID, error: str) -> None:
        """End the operation ``failed`` (its batches so far stand)."""
        op = (
            await conn.execute(bulk.LOCK_HELD, {"id": operation_id, "worker_id": self.worker_id})
        ).first()
        if op is not None:
            await self._progress(
                conn,
                op,
                position=op.position,
                matched=0,
                tally=_Tally(0, {}),
                finish=BulkOperationState.FAILED,
                error={"code": "bulk_operation_failed", "message": error},
            )

    async def _act(
        self, conn: AsyncConnection, op: Row[Any], action: BulkAction, rows: Sequence[Row[Any]]
    ) -> _Tally:
        skipped: Counter[str] = Counter()
        pending: dict[uuid.UUID, JobState] = {}
        for row in sorted(rows, key=lambda r: r.id):
            if op.kinds is not None and row.kind not in op.kinds:
                skipped[BulkSkip.OUTSIDE_SCOPE.value] += 1
            else:
                pending[row.id] = JobState(row.state)
        actor = operator_of(op.requested_by, op.key_id)
        if action is BulkAction.REPLAY:
            return await self._replay(conn, op, actor, pending, skipped)
        done = 0
        for _ in range(_ROUNDS):
            groups: dict[TransitionName, list[uuid.UUID]] = defaultdict(list)
            for job_id, state in pending.items():
                name = BULK_MOVES[action].get(state)
                if name is None:
                    skipped[bulk_skip(action, state) or not_allowed_in(state)] += 1
                else:
                    groups[name].append(job_id)
            pending = {}
            for name, job_ids in groups.items():
                results = await self.transitions.executor.apply(
                    conn, TRANSITIONS[name], [self._step(op, name, j) for j in job_ids], actor=actor
                )
                for job_id, result in zip(job_ids, results, strict=True):
                    if isinstance(result, Applied):
                        done += 1
                    elif result.current is None:
                        skipped[BulkSkip.NOT_FOUND.value] += 1
                    else:
                        pending[job_id] = result.current
        for state in pending.values():
            skipped[bulk_skip(action, state) or not_allowed_in(state)] += 1
        return _Tally(done, skipped)

    def _step(self, op: Row[Any], name: TransitionName, job_id: uuid.UUID) -> Step:
        note = op.note or f"bulk operation {op.id}"
        error = (
            error_doc("operator_failed", note, retryable=False)
            if name is TransitionName.OPERATOR_FAIL
            else None
        )
        return Step(job_id, note=note, error=error, data={"bulk_operation": str(op.id)})

    async def _replay(
        self,
        conn: AsyncConnection,
        op: Row[Any],
        actor: Actor,
        pending: Mapping[uuid.UUID, JobState],
        skipped: Counter[str],
    ) -> _Tally:
        """Each terminal job once: locked, then passed over when some job replays it
        already (an earlier replay, or another operation's that committed first)."""
        candidates = [j for j, state in pending.items() if state in TERMINAL_STATES]
        for state in pending.values():
            if state not in TERMINAL_STATES:
                skipped[not_allowed_in(state)] += 1
        locked = await bulk.lock_for_replay(conn, candidates)
        seen = await bulk.replayed(conn, [row.id for row in locked])
        fresh: list[NewJob] = []
        for row in locked:
            if JobState(row.state) not in TERMINAL_STATES:
                skipped[not_allowed_in(JobState(row.state))] += 1
            elif row.id in seen:
                skipped[BulkSkip.ALREADY_REPLAYED.value] += 1
            else:
                fresh.append(
                    NewJob(
                        owner=row.owner,
                        kind=row.kind,
                        kind_version=row.kind_version,
                        input=row.input,
                        max_attempts=row.max_attempts,
                        max_elapsed_seconds=row.max_elapsed_seconds,
                        replay_of=row.id,
                        tags=tuple(row.tags),
                        trigger={"bulk_operation": str(op.id)},
                    )
                )
        skipped[BulkSkip.NOT_FOUND.value] += len(candidates) - len(locked)
        if fresh:
            await self.transitions.create_many(
                conn,
                fresh,
                actor=actor,
                transition=TransitionName.REPLAY,
                note=op.note or f"bulk operation {op.id}",
            )
        return _Tally(len(fresh), +skipped)

    async def _progress(
        self,
        conn: AsyncConnection,
        op: Row[Any],
        *,
        position: int,
        matched: int,
        tally: _Tally,
        finish: BulkOperationState | None,
        error: Mapping[str, Any] | None = None,
        after_id: uuid.UUID | None = None,
    ) -> Row[Any]:
        """Write a batch's counts and position (``after_id``: a walk by id's new
        position; ``None`` keeps the stored one -- it only ever advances)."""
        return (
            await conn.execute(
                bulk.PROGRESS,
                {
                    "id": op.id,
                    "position": position,
                    "after_id": op.after_id if after_id is None else after_id,
                    "matched": matched,
                    "done": tally.done,
                    "skipped": json.dumps({k: v for k, v in tally.skipped.items() if v}),
                    "finish": None if finish is None else finish.value,
                    "error": None if error is None else json.dumps(dict(error)),
                    "lease_seconds": self.lease_seconds,
                    **self.transitions.clock.bind(),
                },
            )
        ).one()
