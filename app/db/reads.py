"""Read queries for the status, history, listing and queue views.

Reads never lock and never change anything. Owner scoping happens *in the query*
(``owner = :owner``), so a job of another owner is indistinguishable from a missing
one: both return ``None``. ``owner=None`` means "any owner" (operators).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from app.db.schema import attempts, job_history, job_stages, jobs
from app.lifecycle import ACTIVE_STATES, TERMINAL_STATES


async def get_job(
    conn: AsyncConnection, job_id: uuid.UUID, *, owner: str | None
) -> Row[Any] | None:
    """One job row, or ``None`` when it does not exist or belongs to someone else."""
    query = select(jobs).where(jobs.c.id == job_id)
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    return (await conn.execute(query)).first()


async def get_version(conn: AsyncConnection, job_id: uuid.UUID) -> int | None:
    """The job's ``version`` (bumped on every visible change): the ETag's source."""
    version: int | None = await conn.scalar(select(jobs.c.version).where(jobs.c.id == job_id))
    return version


async def stages_for(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, list[Row[Any]]]:
    """Stage rows per job, in plan order (one query for a whole page of jobs)."""
    found: dict[uuid.UUID, list[Row[Any]]] = {job_id: [] for job_id in job_ids}
    if not job_ids:
        return found
    rows = await conn.execute(
        select(job_stages)
        .where(job_stages.c.job_id.in_(list(job_ids)))
        .order_by(job_stages.c.job_id, job_stages.c.position)
    )
    for row in rows:
        found[row.job_id].append(row)
    return found


async def history(
    conn: AsyncConnection, job_id: uuid.UUID, *, after_seq: int = 0, limit: int = 1000
) -> list[Row[Any]]:
    """History rows after ``after_seq``, oldest first, with the attempt's number."""
    rows = await conn.execute(
        select(job_history, attempts.c.number.label("attempt_number"))
        .select_from(job_history.outerjoin(attempts, attempts.c.id == job_history.c.attempt_id))
        .where(job_history.c.job_id == job_id, job_history.c.seq > after_seq)
        .order_by(job_history.c.seq)
        .limit(limit)
    )
    return list(rows.all())


@dataclass(frozen=True, slots=True)
class JobFilter:
    owner: str
    states: Sequence[str] = ()
    kinds: Sequence[str] = ()
    before_seq: int | None = None
    limit: int = 20


async def list_jobs(conn: AsyncConnection, page: JobFilter) -> list[Row[Any]]:
    """The owner's jobs, newest first, keyset-paginated on ``seq`` (ix_jobs_owner_seq).

    Fetches ``limit + 1`` rows so the caller knows whether another page exists."""
    conditions = [jobs.c.owner == page.owner]
    if page.states:
        conditions.append(jobs.c.state.in_(list(page.states)))
    if page.kinds:
        conditions.append(jobs.c.kind.in_(list(page.kinds)))
    if page.before_seq is not None:
        conditions.append(jobs.c.seq < page.before_seq)
    rows = await conn.execute(
        select(jobs).where(and_(*conditions)).order_by(jobs.c.seq.desc()).limit(page.limit + 1)
    )
    return list(rows.all())


@dataclass(frozen=True, slots=True)
class QueueLine:
    kind: str
    kind_version: int
    state: str
    count: int
    oldest_created_at: datetime
    oldest_age_seconds: float
    live_leases: int
    expired_leases: int


async def queue_view(conn: AsyncConnection, now: Any) -> list[QueueLine]:
    """Every non-terminal (kind, version, state) with counts, oldest age and leases.

    A job no worker can handle shows up here, queued and ageing -- never hidden."""
    active = [s.value for s in ACTIVE_STATES]
    live = and_(jobs.c.state.in_(active), jobs.c.lease_expires_at > now)
    expired = and_(jobs.c.state.in_(active), jobs.c.lease_expires_at <= now)
    oldest = func.min(jobs.c.created_at)
    rows = await conn.execute(
        select(
            jobs.c.kind,
            jobs.c.kind_version,
            jobs.c.state,
            func.count().label("job_count"),
            oldest.label("oldest"),
            func.extract("epoch", now - oldest).label("age"),
            func.count().filter(live).label("live"),
            func.count().filter(expired).label("expired"),
        )
        .where(jobs.c.state.notin_([s.value for s in TERMINAL_STATES]))
        .group_by(jobs.c.kind, jobs.c.kind_version, jobs.c.state)
        .order_by(jobs.c.kind, jobs.c.kind_version, jobs.c.state)
    )
    return [
        QueueLine(
            kind=row.kind,
            kind_version=row.kind_version,
            state=row.state,
            count=row.job_count,
            oldest_created_at=row.oldest,
            oldest_age_seconds=max(0.0, float(row.age)),
            live_leases=row.live,
            expired_leases=row.expired,
        )
        for row in rows
    ]


async def counts_by_state(conn: AsyncConnection) -> list[Row[Any]]:
    """Job counts per kind and state, for the metrics gauge."""
    rows = await conn.execute(
        select(jobs.c.kind, jobs.c.state, func.count().label("job_count")).group_by(
            jobs.c.kind, jobs.c.state
        )
    )
    return list(rows.all())


__all__ = [
    "JobFilter",
    "QueueLine",
    "counts_by_state",
    "get_job",
    "get_version",
    "history",
    "list_jobs",
    "queue_view",
    "stages_for",
]
