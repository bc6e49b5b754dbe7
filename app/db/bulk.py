"""SQL of bulk operations (``bulk_operations``): accept, read, claim, a batch's progress,
cancel.

A running operation is held by one worker process through a lease (``worker_id``,
``lease_expires_at``), the fencing token of its batches: each batch locks the operation
row first (``LOCK_HELD``), then its jobs in id order (the executor), and writes its
progress in the same transaction. A worker that lost the lease (it stalled, another took
over) finds the row no longer its own and rolls its batch back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, and_, func, select, text, true
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import NOW_SQL
from atlas_jobs._app.db.reads import (
    JobFilter,
    job_conditions,
    single_owner,
    walk_from,
    walk_id,
    walks_by_id,
)
from atlas_jobs._app.db.records import JobRow, job_rows
from atlas_jobs._app.db.schema import bulk_operations, jobs
from atlas_jobs._app.ids import new_id
from atlas_jobs._app.lifecycle import BulkOperationState

_QUEUED = BulkOperationState.QUEUED.value
_RUNNING = BulkOperationState.RUNNING.value
_CANCELED = BulkOperationState.CANCELED.value
_NOW = NOW_SQL
NIL_ID = uuid.UUID(int=0)

# accept: the operation row; a filter is bounded by the newest job at this moment, so
# the operation acts on the jobs that existed when it was accepted, not on every job
# created while it runs: one owner's filter by that owner's newest seq (``through_seq``,
# the last entry of the owner's range in ``ix_jobs_owner_seq``), a filter across owners
# by the newest id (``through_id``, the last entry of ``pk_jobs``; the nil UUID when there
# is no job). Each subselect runs only for its walk (an InitPlan is evaluated when used).
ACCEPT = text(f"""
INSERT INTO bulk_operations (id, action, filter, job_ids, note, requested_by, key_id, kinds,
                             through_seq, through_id, created_at, updated_at)
VALUES (:id, :action, CAST(:filter AS jsonb), CAST(:job_ids AS uuid[]), :note, :requested_by,
        :key_id, CAST(:kinds AS text[]),
        CASE WHEN CAST(:walk_owner AS text) IS NOT NULL
             THEN (SELECT coalesce(max(seq), 0) FROM jobs WHERE owner = CAST(:walk_owner AS text))
        END,
        CASE WHEN CAST(:walk_ids AS boolean)
             THEN coalesce((SELECT id FROM jobs ORDER BY id DESC LIMIT 1), '{NIL_ID}'::uuid)
        END,
        {_NOW}, {_NOW})
RETURNING *, {_NOW} AS observed_at
""")

# claim: the oldest operation no live lease holds (queued, or running under an expired
# lease: its worker died), taken with SKIP LOCKED so workers never wait for each other.
CLAIM = text(f"""
WITH picked AS (
    SELECT id FROM bulk_operations
     WHERE state IN ('{_QUEUED}', '{_RUNNING}')
       AND (lease_expires_at IS NULL OR lease_expires_at <= {_NOW})
     ORDER BY created_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED
)
UPDATE bulk_operations AS b
   SET state = '{_RUNNING}', worker_id = :worker_id,
       lease_expires_at = {_NOW} + make_interval(secs => :lease_seconds),
       started_at = coalesce(b.started_at, {_NOW}), updated_at = {_NOW},
       version = b.version + 1
  FROM picked
 WHERE b.id = picked.id
RETURNING b.*
""")

# lock_held: a batch's first statement -- the operation row, locked, while this worker
# holds its lease; no row: the lease is lost (or the operation ended), do nothing.
LOCK_HELD = text(f"""
SELECT * FROM bulk_operations
 WHERE id = :id AND worker_id = :worker_id AND state = '{_RUNNING}'
   FOR UPDATE
""")

# progress: a batch's last statement -- its counts, the new position (``position``, or
# ``after_id`` for a walk by id) and a fresh lease; ``finish`` (a state) ends the operation.
PROGRESS = text(f"""
UPDATE bulk_operations
   SET position = :position, after_id = CAST(:after_id AS uuid),
       matched = matched + :matched, done = done + :done,
       skipped = (
           SELECT coalesce(jsonb_object_agg(key, total), '{{}}'::jsonb)
             FROM (
                 SELECT key, sum(value::bigint) AS total
                   FROM (SELECT * FROM jsonb_each_text(skipped)
                         UNION ALL
                         SELECT * FROM jsonb_each_text(CAST(:skipped AS jsonb))) AS both_counts
                  GROUP BY key
             ) AS merged
       ),
       state = coalesce(CAST(:finish AS text), state),
       finished_at = CASE WHEN CAST(:finish AS text) IS NULL THEN NULL ELSE {_NOW} END,
       error = CAST(:error AS jsonb),
       lease_expires_at = CASE WHEN CAST(:finish AS text) IS NULL
                               THEN {_NOW} + make_interval(secs => :lease_seconds) END,
       worker_id = CASE WHEN CAST(:finish AS text) IS NULL THEN worker_id END,
       updated_at = {_NOW}, version = version + 1
 WHERE id = :id
RETURNING *
""")

# cancel: a queued operation ends at once; a running one is marked, and its worker ends
# it canceled before its next batch. An ended operation is left as it is.
CANCEL = text(f"""
UPDATE bulk_operations
   SET cancel_requested_at = coalesce(cancel_requested_at, {_NOW}),
       state = CASE WHEN state = '{_QUEUED}' THEN '{_CANCELED}' ELSE state END,
       finished_at = CASE WHEN state = '{_QUEUED}' THEN {_NOW} ELSE finished_at END,
       updated_at = {_NOW}, version = version + 1
 WHERE id = :id AND state IN ('{_QUEUED}', '{_RUNNING}')
RETURNING *, {_NOW} AS observed_at
""")


def filter_document(page: JobFilter) -> dict[str, Any]:
    """A filter as the operation row stores it (and the worker reads it back)."""
    return {
        "owner": page.owner,
        "states": list(page.states),
        "kinds": list(page.kinds),
        "owners": list(page.owners),
        "tags": list(page.tags),
        "reasons": list(page.reasons),
        "error_codes": list(page.error_codes),
        "created_after": _iso(page.created_after),
        "created_before": _iso(page.created_before),
        "finished_after": _iso(page.finished_after),
        "finished_before": _iso(page.finished_before),
    }


def stored_filter(document: Mapping[str, Any]) -> JobFilter:
    def when(name: str) -> datetime | None:
        value = document.get(name)
        return None if value is None else datetime.fromisoformat(value)

    return JobFilter(
        owner=document.get("owner"),
        states=document.get("states", []),
        kinds=document.get("kinds", []),
        owners=document.get("owners", []),
        tags=document.get("tags", []),
        reasons=document.get("reasons", []),
        error_codes=document.get("error_codes", []),
        created_after=when("created_after"),
        created_before=when("created_before"),
        finished_after=when("finished_after"),
        finished_before=when("finished_before"),
    )


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


async def accept(
    conn: AsyncConnection,
    *,
    action: str,
    page: JobFilter | None,
    job_ids: Sequence[uuid.UUID] | None,
    note: str | None,
    requested_by: str,
    key_id: uuid.UUID | None,
    kinds: Sequence[str] | None,
    clock_params: Mapping[str, float],
) -> Row[Any]:
    return (
        await conn.execute(
            ACCEPT,
            {
                "id": new_id(),
                "action": action,
                "filter": None if page is None else json.dumps(filter_document(page)),
                "job_ids": None if job_ids is None else list(job_ids),
                "note": note,
                "requested_by": requested_by,
                "key_id": key_id,
                "kinds": None if kinds is None else list(kinds),
                "walk_owner": None if page is None else single_owner(page),
                "walk_ids": page is not None and walks_by_id(page),
                **clock_params,
            },
        )
    ).one()


async def get(conn: AsyncConnection, operation_id: uuid.UUID) -> Row[Any] | None:
    return (
        await conn.execute(
            select(bulk_operations, func.now().label("observed_at")).where(
                bulk_operations.c.id == operation_id
            )
        )
    ).first()


async def listing(conn: AsyncConnection, *, before_seq: int | None, limit: int) -> list[Row[Any]]:
    """Operations newest first, ``limit`` of them (the caller asks for a page's
    :func:`~atlas_jobs._app.db.pages.fetch_size`)."""
    query = select(bulk_operations).order_by(bulk_operations.c.seq.desc()).limit(limit)
    if before_seq is not None:
        query = query.where(bulk_operations.c.seq < before_seq)
    return list((await conn.execute(query)).all())


async def cancel(
    conn: AsyncConnection, operation_id: uuid.UUID, clock_params: Mapping[str, float]
) -> Row[Any] | None:
    """The operation after the cancel, or ``None`` when it had ended (or is unknown)."""
    return (await conn.execute(CANCEL, {"id": operation_id, **clock_params})).first()


async def preview(
    conn: AsyncConnection, page: JobFilter, *, cap: int, sample: int
) -> tuple[int, list[JobRow]]:
    """A dry run: how many jobs the filter selects (counted up to ``cap``) and the newest
    ``sample`` of them."""
    conditions = job_conditions(page)
    counted = (
        walk_from(page, select(jobs.c.id)).where(and_(true(), *conditions)).limit(cap).subquery()
    )
    count = int(await conn.scalar(select(func.count()).select_from(counted)) or 0)
    rows = await conn.execute(
        walk_from(page, select(jobs, func.now().label("observed_at")))
        .where(and_(true(), *conditions))
        .order_by(*_walk_order(page, descending=True))
        .limit(sample)
    )
    return count, job_rows(list(rows.all()))


def _walk_order(page: JobFilter, *, descending: bool) -> tuple[ColumnElement[Any], ...]:
    """The order of a filter's walk: one owner's jobs in ``(owner, seq)`` order, which
    ``ix_jobs_owner_seq`` gives (see :func:`~atlas_jobs._app.db.reads.single_owner`);
    across owners ``id`` order (``pk_jobs``, or ``job_tags``' primary key for a tag:
    :func:`~atlas_jobs._app.db.reads.walk_from`; ids are UUIDv7, creation order)."""
    columns = (walk_id(page),) if walks_by_id(page) else (jobs.c.owner, jobs.c.seq)
    return tuple(c.desc() if descending else c.asc() for c in columns)


async def preview_ids(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID], *, sample: int
) -> tuple[int, list[JobRow]]:
    """A dry run of an id list: how many of the ids name a job, and a sample of them."""
    count = int(await conn.scalar(select(func.count()).where(jobs.c.id.in_(list(job_ids)))) or 0)
    rows = await conn.execute(
        select(jobs, func.now().label("observed_at"))
        .where(jobs.c.id.in_(list(job_ids)))
        .order_by(jobs.c.seq.desc())
        .limit(sample)
    )
    return count, job_rows(list(rows.all()))


async def filter_batch(conn: AsyncConnection, page: JobFilter, op: Any, *, limit: int) -> list[Any]:
    """The next jobs of the operation ``op``'s filter ``page`` (oldest first), never
    locking: the moves lock and compare-and-set them. Across owners, after ``op.after_id``
    (none yet: from the first) up to ``op.through_id``; for one owner, after
    ``op.position`` up to ``op.through_seq``."""
    return list((await conn.execute(filter_batch_query(page, op, limit=limit))).all())


def filter_batch_query(page: JobFilter, op: Any, *, limit: int) -> Select[Any]:
    """:func:`filter_batch`'s statement: across owners a walk of ``pk_jobs`` forwards (or,
    for a tag, of ``job_tags``' primary key: the search's walk in the other direction)."""
    keyset: list[ColumnElement[bool]]
    if walks_by_id(page):
        key = walk_id(page)
        keyset = [key <= op.through_id]
        if op.after_id is not None:
            keyset.append(key > op.after_id)
    else:
        keyset = [jobs.c.seq > op.position, jobs.c.seq <= op.through_seq]
    return (
        walk_from(page, select(jobs.c.id, jobs.c.seq, jobs.c.state, jobs.c.kind))
        .where(and_(true(), *job_conditions(page)), *keyset)
        .order_by(*_walk_order(page, descending=False))
        .limit(limit)
    )


async def jobs_by_id(conn: AsyncConnection, job_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Any]:
    rows = await conn.execute(
        select(jobs.c.id, jobs.c.seq, jobs.c.state, jobs.c.kind).where(jobs.c.id.in_(list(job_ids)))
    )
    return {row.id: row for row in rows}


async def replayed(conn: AsyncConnection, job_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``job_ids`` some job replays already (``ix_jobs_replay_of``)."""
    if not job_ids:
        return set()
    rows = await conn.execute(
        select(jobs.c.replay_of).where(jobs.c.replay_of.in_(list(job_ids))).distinct()
    )
    return {row.replay_of for row in rows}


async def lock_for_replay(conn: AsyncConnection, job_ids: Sequence[uuid.UUID]) -> list[JobRow]:
    """The jobs to replay, locked in id order (two replays of one job queue here, and
    the second then sees the first's new job)."""
    rows = await conn.execute(
        select(jobs).where(jobs.c.id.in_(list(job_ids))).order_by(jobs.c.id).with_for_update()
    )
    return job_rows(list(rows.all()))
