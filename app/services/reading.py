"""Reading a job: its row and its status body, and listings of jobs, a page at a time.
The answers are as of one version of the job (its stages read at that version)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import Connects
from atlas_jobs._app.db.reads import JobFilter as JobFilter  # what a listing asks for
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.services.paging import JOB_CURSOR, fetch_size, page_of
from atlas_jobs._app.services.refusals import JobNotFound
from atlas_jobs._app.services.schemas import HistoryItem, JobPublic
from atlas_jobs._app.services.views import (
    etag_matches,
    history_item,
    job_status,
    waiting_for,
    waiting_tag,
)


async def public_status(conn: AsyncConnection, job: JobRow) -> JobPublic:
    """The status body of a job row; its stages are read only when it has a plan."""
    return job_status(job, await reads.plan_stages(conn, job))


async def public_statuses(conn: AsyncConnection, rows: Sequence[JobRow]) -> list[JobPublic]:
    """The status bodies of many job rows; stages read once, for those with a plan."""
    planned = [row.id for row in rows if row.plan_revision]
    stages = await reads.stages_for(conn, planned) if planned else {}
    return [job_status(row, stages.get(row.id, [])) for row in rows]


async def read_status(
    conn: AsyncConnection, job_id: uuid.UUID, *, owner: str | None, clock: Clock | None = None
) -> tuple[JobRow, JobPublic]:
    """The job row and its status body; 404 for unknown *and* for not-yours."""
    now = (clock or Clock()).now()

    async def read_job() -> JobRow | None:
        return await reads.get_job(conn, job_id, owner=owner, now=now)

    job = await read_job()
    if job is None:
        raise JobNotFound()
    job, public = await _same_version_status(conn, job, read_job, if_none_match=None)
    assert public is not None
    return job, public


async def read_status_once(
    engine: AsyncEngine, job_id: uuid.UUID, *, owner: str | None, clock: Clock | None = None
) -> tuple[JobRow, JobPublic]:
    """Like :func:`read_status` on a short-lived connection (nothing held while waiting)."""
    async with engine.connect() as conn:
        return await read_status(conn, job_id, owner=owner, clock=clock)


async def read_status_unless_current(
    connections: Connects,
    job_id: uuid.UUID,
    *,
    owner: str | None,
    clock: Clock,
    if_none_match: str | None,
) -> tuple[JobRow, JobPublic | None]:
    """Like :func:`read_status_once`, but with ``None`` for the body when
    ``If-None-Match`` names the row's version: a 304 needs no body, so its stages are
    not read and nothing is built (one statement). The row holds the status columns
    only (:func:`~atlas_jobs._app.db.reads.get_job_now`)."""
    async with connections.connect() as conn:

        async def read_job() -> JobRow | None:
            return await reads.get_job_now(conn, job_id, owner=owner, clock=clock)

        job = await read_job()
        if job is None:
            raise JobNotFound()
        if etag_matches(if_none_match, job.version, waiting_tag(waiting_for(job))):
            return job, None
        return await _same_version_status(conn, job, read_job, if_none_match=if_none_match)


READ_TRIES = 3
"""Reads of a planned job's stages before the newest pair is answered as it is: a job
changes far less often than three times within one status read."""


async def _same_version_status(
    conn: AsyncConnection,
    job: JobRow,
    read_job: Callable[[], Awaitable[JobRow | None]],
    *,
    if_none_match: str | None,
) -> tuple[JobRow, JobPublic | None]:
    """The status body of ``job`` from stages read at the same version of the job: when a
    change committed between the job's statement and the stages' (no snapshot spans them
    on an autocommit read), the job is read again. ``None`` for the body when the row
    read again matches ``If-None-Match``; 404 when it is gone."""
    for _ in range(READ_TRIES):
        stages = await reads.plan_stages_of_version(conn, job)
        if stages is not None:
            return job, job_status(job, stages)
        again = await read_job()
        if again is None:
            raise JobNotFound()
        job = again
        if etag_matches(if_none_match, job.version, waiting_tag(waiting_for(job))):
            return job, None
    return job, await public_status(conn, job)


async def job_history(
    connections: Connects, job_id: uuid.UUID, *, owner: str | None, after: int, limit: int
) -> tuple[list[HistoryItem], int | None]:
    """A page of the job's recorded transitions after ``seq`` ``after``, oldest first,
    and where the next page starts while more follow; 404 for unknown and not-yours."""
    async with connections.connect() as conn:
        job = await reads.get_job(conn, job_id, owner=owner)
        if job is None:
            raise JobNotFound()
        rows = await reads.history(conn, job_id, after_seq=after, limit=fetch_size(limit))
    found = page_of(rows, limit)
    return [history_item(row) for row in found.shown], found.next(lambda row: row.seq)


@dataclass(frozen=True, slots=True)
class JobListing:
    """A page of a job listing: the status bodies, newest first, and the cursor of the
    next page while more follow."""

    statuses: list[JobPublic]
    next_cursor: str | None
    owners: list[str] = field(default_factory=list)
    """Each status's owner, in the same order (an operator's listing shows them)."""


async def list_jobs(connections: Connects, query: reads.JobFilter, *, clock: Clock) -> JobListing:
    """One page of ``query`` (``reads.list_jobs`` fetches one row beyond it), keyset
    paginated on ``seq`` for one owner, on ``id`` across owners (the cursor says which):
    stable under concurrent inserts."""
    async with connections.connect() as conn:
        rows = await reads.list_jobs(conn, query, now=clock.now())
        found = page_of(rows, query.limit)
        stages = await reads.stages_for(conn, [row.id for row in found.shown])
    return JobListing(
        [job_status(row, stages[row.id]) for row in found.shown],
        JOB_CURSOR.after(query, found),
        [row.owner for row in found.shown],
    )
