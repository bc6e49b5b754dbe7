"""Bulk operations: an operator's action (cancel, resume, fail, replay) over a filter or
an id list, accepted here and run by the workers a batch at a time.

The API's ``/v1/bulk-operations`` and the operators' page both come here: a dry run's
count and sample, the acceptance (recorded with the operator's key and kinds, which the
workers apply), reads (held until the operation ends, or followed change by change), and
the cancel. An unknown operation is :class:`BulkOperationNotFound`; a cancel of one that
has ended, :class:`BulkOperationEnded`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import bulk, reads
from atlas_jobs._app.db.engine import Connects
from atlas_jobs._app.db.reads import JobFilter
from atlas_jobs._app.lifecycle import TERMINAL_BULK_OPERATION_STATES, ActorKind
from atlas_jobs._app.services.paging import Page, fetch_size, page_of
from atlas_jobs._app.services.refusals import BulkOperationEnded, BulkOperationNotFound
from atlas_jobs._app.services.schemas import JobPublic
from atlas_jobs._app.services.views import job_status
from atlas_jobs._app.transitions import Actor

POLL_SECONDS = 0.25
"""How often a held read or a followed operation looks at the operation's row again."""


@dataclass(frozen=True, slots=True)
class Preview:
    """A dry run: how many jobs the action selects now (counted up to the cap asked
    for), and the newest of them."""

    matched: int
    sample: list[JobPublic]


def ended(row: Any) -> bool:
    """Whether the operation has ended (nothing more changes)."""
    return row.state in TERMINAL_BULK_OPERATION_STATES


def requested_by(operator: Principal) -> str:
    """Who an operation records as its requester: ``operator:<owner>``."""
    return str(Actor(ActorKind.OPERATOR, operator.owner))


async def preview(
    reads_engine: Connects,
    *,
    page: JobFilter | None,
    job_ids: Sequence[uuid.UUID] | None,
    cap: int,
    sample: int,
) -> Preview:
    """Count (up to ``cap``) and sample (``sample`` newest) the jobs a filter or an id
    list selects, without accepting anything."""
    async with reads_engine.connect() as conn:
        if page is not None:
            count, rows = await bulk.preview(conn, page, cap=cap, sample=sample)
        else:
            assert job_ids is not None
            count, rows = await bulk.preview_ids(conn, job_ids, sample=sample)
        stages = await reads.stages_for(conn, [row.id for row in rows])
    return Preview(count, [job_status(row, stages[row.id]) for row in rows])


async def accept(
    engine: AsyncEngine,
    *,
    action: str,
    page: JobFilter | None,
    job_ids: Sequence[uuid.UUID] | None,
    note: str | None,
    operator: Principal,
    clock: Clock,
) -> Row[Any]:
    """The accepted operation (durable on return). A filter is fixed now: jobs created
    later are not included. The workers act only within the operator key's kinds."""
    async with engine.begin() as conn:
        return await bulk.accept(
            conn,
            action=action,
            page=page,
            job_ids=job_ids,
            note=note,
            requested_by=requested_by(operator),
            key_id=operator.key_id,
            kinds=None if operator.kinds is None else sorted(operator.kinds),
            clock_params=clock.bind(),
        )


async def listing(reads_engine: Connects, *, before_seq: int | None, limit: int) -> Page[Row[Any]]:
    """One page of operations, newest first."""
    async with reads_engine.connect() as conn:
        rows = await bulk.listing(conn, before_seq=before_seq, limit=fetch_size(limit))
    return page_of(rows, limit)


async def read(reads_engine: Connects, operation_id: uuid.UUID) -> Row[Any]:
    """The operation now (:class:`BulkOperationNotFound` when there is none)."""
    async with reads_engine.connect() as conn:
        row = await bulk.get(conn, operation_id)
    if row is None:
        raise BulkOperationNotFound()
    return row


async def read_held(
    reads_engine: Connects, operation_id: uuid.UUID, *, wait: float | None
) -> Row[Any]:
    """The operation once it has ended, or after ``wait`` seconds (``None``: at once),
    whichever comes first."""
    deadline = time.monotonic() + (wait or 0)
    while True:
        row = await read(reads_engine, operation_id)
        if ended(row) or time.monotonic() >= deadline:
            return row
        await asyncio.sleep(POLL_SECONDS)


async def follow(reads_engine: Connects, first: Row[Any]) -> AsyncIterator[Row[Any]]:
    """The operation from ``first`` on, once per change (its ``version``); ends after it
    has ended, or when the row is gone."""
    row, sent = first, None
    while True:
        if row.version != sent:
            sent = row.version
            yield row
        if ended(row):
            return
        await asyncio.sleep(POLL_SECONDS)
        async with reads_engine.connect() as conn:
            found = await bulk.get(conn, row.id)
        if found is None:
            return
        row = found


async def cancel(engine: AsyncEngine, operation_id: uuid.UUID, *, clock: Clock) -> Row[Any]:
    """Cancel: a queued operation ends ``canceled`` at once, a running one before its
    next batch (the batches done stand). Refused with the state once it has ended."""
    async with engine.begin() as conn:
        row = await bulk.cancel(conn, operation_id, clock.bind())
        current = None if row is not None else await bulk.get(conn, operation_id)
    if row is not None:
        return row
    if current is None:
        raise BulkOperationNotFound()
    raise BulkOperationEnded(current.state)


__all__ = [
    "POLL_SECONDS",
    "Preview",
    "accept",
    "cancel",
    "ended",
    "follow",
    "listing",
    "preview",
    "read",
    "read_held",
    "requested_by",
]
