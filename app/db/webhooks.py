"""Webhooks' storage: endpoints, the jobs that notify them, and the delivery outbox.

The outbox rows are written by the ``jobs_updated`` trigger (in the
transaction of the move that causes them); this module registers endpoints, attaches
jobs to them at creation, and gives the sender its claim and record statements.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, func, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import NOW_SQL
from atlas_jobs._app.db.schema import job_webhooks, webhook_deliveries, webhooks
from atlas_jobs._app.ids import new_id


async def register(
    conn: AsyncConnection,
    *,
    owner: str,
    url: str,
    secret: str,
    description: str | None,
    created_by: str,
) -> Row[Any]:
    row = await conn.execute(
        insert(webhooks)
        .values(
            id=new_id(),
            owner=owner,
            url=url,
            secret=secret,
            description=description,
            created_by=created_by,
        )
        .returning(webhooks)
    )
    created: Row[Any] = row.one()
    return created


def _visible(owner: str | None) -> Any:
    return webhooks.c.owner == owner if owner is not None else True


async def get(
    conn: AsyncConnection, webhook_id: uuid.UUID, *, owner: str | None
) -> Row[Any] | None:
    return (
        await conn.execute(select(webhooks).where(webhooks.c.id == webhook_id, _visible(owner)))
    ).first()


async def page(
    conn: AsyncConnection, *, owner: str | None, before_seq: int | None, limit: int
) -> list[Row[Any]]:
    query = select(webhooks).where(_visible(owner))
    if before_seq is not None:
        query = query.where(webhooks.c.seq < before_seq)
    return list((await conn.execute(query.order_by(webhooks.c.seq.desc()).limit(limit))).all())


async def remove(conn: AsyncConnection, webhook_id: uuid.UUID, *, owner: str | None) -> bool:
    """Delete an endpoint; its pending deliveries go with it (the jobs are untouched)."""
    result = await conn.execute(
        delete(webhooks)
        .where(webhooks.c.id == webhook_id, _visible(owner))
        .returning(webhooks.c.id)
    )
    return result.first() is not None


async def owned(conn: AsyncConnection, owner: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
    """Which of ``ids`` are endpoints of ``owner``."""
    if not ids:
        return set()
    rows = await conn.execute(
        select(webhooks.c.id).where(webhooks.c.owner == owner, webhooks.c.id.in_(set(ids)))
    )
    return {row.id for row in rows}


async def attach(conn: AsyncConnection, links: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> None:
    """Make each ``(job_id, webhook_id)`` notify: in the creation's transaction."""
    if links:
        await conn.execute(
            pg_insert(job_webhooks)
            .values([{"job_id": j, "webhook_id": w} for j, w in links])
            .on_conflict_do_nothing()
        )


async def deliveries_of(conn: AsyncConnection, job_id: uuid.UUID) -> list[Row[Any]]:
    """A job's deliveries, oldest first."""
    rows = await conn.execute(
        select(webhook_deliveries)
        .where(webhook_deliveries.c.job_id == job_id)
        .order_by(webhook_deliveries.c.seq)
    )
    return list(rows.all())


async def count_pending(conn: AsyncConnection) -> int:
    pending = await conn.execute(
        select(func.count())
        .select_from(webhook_deliveries)
        .where(webhook_deliveries.c.state.in_(("pending", "sending")))
    )
    return int(pending.scalar_one())


# -- the sender's statements -----------------------------------------------------------

# claim_due: the due deliveries -- pending ones whose time came, and ones a worker was
# sending when its lease ran out (it died) -- taken with a lease, attempt counted first:
# a delivery is never sent without its attempt being recorded.
CLAIM_DUE = text(f"""
WITH due AS (
    SELECT id
      FROM webhook_deliveries
     WHERE state IN ('pending', 'sending')
       AND next_attempt_at <= {NOW_SQL}
       AND (state = 'pending' OR lease_expires_at < {NOW_SQL})
     ORDER BY next_attempt_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries AS d
   SET state = 'sending',
       attempts = d.attempts + 1,
       lease_expires_at = {NOW_SQL} + make_interval(secs => :lease_seconds),
       updated_at = {NOW_SQL}
  FROM due, webhooks AS w
 WHERE d.id = due.id AND w.id = d.webhook_id
RETURNING d.id, d.job_id, d.webhook_id, d.event, d.attempts, w.url, w.secret,
          {NOW_SQL} AS sent_at
""")

# record: the outcome of one attempt, fenced by (id, attempts): a sender whose lease ran
# out and whose delivery another sender took over records nothing.
RECORD = text(f"""
UPDATE webhook_deliveries AS d
   SET state = i.state,
       last_status_code = i.status_code,
       last_error = i.error,
       next_attempt_at = {NOW_SQL} + make_interval(secs => i.retry_in),
       delivered_at = CASE WHEN i.state = 'delivered' THEN {NOW_SQL} END,
       lease_expires_at = NULL,
       updated_at = {NOW_SQL}
  FROM unnest(CAST(:id AS uuid[]), CAST(:attempts AS int[]), CAST(:state AS text[]),
              CAST(:status_code AS int[]), CAST(:error AS text[]),
              CAST(:retry_in AS float8[]))
       AS i(id, attempts, state, status_code, error, retry_in)
 WHERE d.id = i.id AND d.attempts = i.attempts AND d.state = 'sending'
""")


@dataclass(frozen=True, slots=True)
class Outcome:
    delivery_id: uuid.UUID
    attempts: int
    state: str
    status_code: int | None
    error: str | None
    retry_in: float


async def claim_due(
    conn: AsyncConnection, *, limit: int, lease_seconds: float, clock_offset: float
) -> list[Row[Any]]:
    rows = await conn.execute(
        CLAIM_DUE,
        {"limit": limit, "lease_seconds": lease_seconds, "clock_offset": clock_offset},
    )
    return list(rows.all())


async def record(conn: AsyncConnection, outcomes: Sequence[Outcome], clock_offset: float) -> None:
    if outcomes:
        await conn.execute(
            RECORD,
            {
                "id": [o.delivery_id for o in outcomes],
                "attempts": [o.attempts for o in outcomes],
                "state": [o.state for o in outcomes],
                "status_code": [o.status_code for o in outcomes],
                "error": [o.error for o in outcomes],
                "retry_in": [o.retry_in for o in outcomes],
                "clock_offset": clock_offset,
            },
        )


def sent_at(row: Any) -> datetime:
    value: datetime = row.sent_at
    return value
