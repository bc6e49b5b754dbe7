"""Schedules' storage: the rows behind ``/v1/schedules`` and the scheduler's statements.

The rules (which ticks are due, DST, misfires) live in :mod:`atlas_jobs._app.scheduling`; job
creation goes through :meth:`atlas_jobs._app.transitions.Transitions.create_many` like every other
creation. This module only reads and writes ``schedules`` and ``schedule_fires``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row, delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import NOW_SQL, Clock
from atlas_jobs._app.db.schema import schedule_fires, schedules
from atlas_jobs._app.ids import new_id
from atlas_jobs._app.scheduling import Cron, FireRefusal, MisfirePolicy, OverlapPolicy


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule: what to run, when, and what to do with missed ticks."""

    owner: str
    name: str | None
    cron: Cron
    kind: str
    kind_version: int
    input: Mapping[str, Any]
    enabled: bool
    misfire_policy: MisfirePolicy
    misfire_grace_seconds: int
    catch_up_limit: int
    notify: uuid.UUID | None = None
    """A webhook endpoint of the owner that every created job notifies."""
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    delay_seconds: int | None = None
    """Each tick's job is not claimed before the tick plus this."""
    start_within_seconds: int | None = None
    """Each tick's job fails unless claimed by the tick plus this."""
    priority: int | None = None
    concurrency_key: str | None = None
    """The key each job names (where its kind takes one), as the create body's."""
    tags: tuple[str, ...] = ()
    """The ``key=value`` tags each job carries, sorted (atlas_jobs._app.tags)."""


async def database_now(conn: AsyncConnection, clock: Clock) -> datetime:
    now: datetime = (await conn.execute(select(clock.now()))).scalar_one()
    return now


# lock_owner_schedules: a per-owner advisory lock held to the end of the transaction, so
# two creations racing cannot both take the last place. The two-key form: its key space
# does not overlap the one-key locks of admission and Idempotency-Keys, whose keys are
# built from owner-chosen text.
LOCK_OWNER_SCHEDULES = text(
    "SELECT pg_advisory_xact_lock(hashtext('atlas.schedules'), hashtext(CAST(:owner AS text)))"
)
# owner_schedules: how many schedules an owner has. A statement of its own, AFTER the
# lock: under READ COMMITTED each statement takes its snapshot when it starts, and a count
# in the locking statement would not see a schedule committed while it waited.
OWNER_SCHEDULES = text("SELECT count(*) FROM schedules WHERE owner = CAST(:owner AS text)")


async def insert(
    conn: AsyncConnection,
    spec: ScheduleSpec,
    *,
    created_by: str,
    clock: Clock,
    max_per_owner: int | None = None,
) -> Row[Any] | int:
    """A new schedule whose first tick is the first one after now; with
    ``max_per_owner``, nothing is written when the owner already has that many: the
    answer is then their count."""
    if max_per_owner is not None:
        await conn.execute(LOCK_OWNER_SCHEDULES, {"owner": spec.owner})
        counted = int((await conn.execute(OWNER_SCHEDULES, {"owner": spec.owner})).scalar_one())
        if counted >= max_per_owner:
            return counted
    now = await database_now(conn, clock)
    row = await conn.execute(
        schedules.insert()
        .values(
            id=new_id(),
            owner=spec.owner,
            name=spec.name,
            cron=spec.cron.expression,
            timezone=spec.cron.timezone,
            kind=spec.kind,
            kind_version=spec.kind_version,
            input=dict(spec.input),
            notify_webhook_id=spec.notify,
            job_delay_seconds=spec.delay_seconds,
            job_start_within_seconds=spec.start_within_seconds,
            priority=spec.priority,
            concurrency_key=spec.concurrency_key,
            job_tags=list(spec.tags),
            overlap=spec.overlap.value,
            enabled=spec.enabled,
            misfire_policy=spec.misfire_policy.value,
            misfire_grace_seconds=spec.misfire_grace_seconds,
            catch_up_limit=spec.catch_up_limit,
            next_fire_at=spec.cron.next_after(now),
            created_by=created_by,
            created_at=now,
            updated_at=now,
        )
        .returning(schedules)
    )
    created: Row[Any] = row.one()
    return created


def _visible(owner: str | None) -> Any:
    return schedules.c.owner == owner if owner is not None else True


async def get(
    conn: AsyncConnection, schedule_id: uuid.UUID, *, owner: str | None
) -> Row[Any] | None:
    """One schedule, if ``owner`` may see it (``None``: every owner's, for operators)."""
    row = await conn.execute(
        select(schedules).where(schedules.c.id == schedule_id, _visible(owner))
    )
    return row.first()


async def page(
    conn: AsyncConnection,
    *,
    owner: str | None,
    enabled: bool | None,
    before_seq: int | None,
    limit: int,
) -> list[Row[Any]]:
    """Newest first; ``limit`` rows (the caller asks for one more to know if a page follows)."""
    query = select(schedules).where(_visible(owner))
    if enabled is not None:
        query = query.where(schedules.c.enabled == enabled)
    if before_seq is not None:
        query = query.where(schedules.c.seq < before_seq)
    rows = await conn.execute(query.order_by(schedules.c.seq.desc()).limit(limit))
    return list(rows.all())


async def change(
    conn: AsyncConnection,
    schedule_id: uuid.UUID,
    *,
    owner: str | None,
    changes: Mapping[str, Any],
    clock: Clock,
) -> Row[Any] | None:
    """Apply ``changes`` (column -> value) under the row lock. A new timing (cron, time
    zone) or a re-enabled schedule starts from the first tick after now: a paused
    schedule does not catch up the ticks of its pause."""
    current = (
        await conn.execute(
            select(schedules)
            .where(schedules.c.id == schedule_id, _visible(owner))
            .with_for_update()
        )
    ).first()
    if current is None:
        return None
    values = dict(changes)
    now = await database_now(conn, clock)
    retimed = any(
        key in values and values[key] != getattr(current, key) for key in ("cron", "timezone")
    )
    resumed = values.get("enabled") is True and not current.enabled
    if retimed or resumed:
        cron = Cron(values.get("cron", current.cron), values.get("timezone", current.timezone))
        values["next_fire_at"] = cron.next_after(now)
    values["updated_at"] = now
    row = await conn.execute(
        update(schedules).where(schedules.c.id == schedule_id).values(**values).returning(schedules)
    )
    changed: Row[Any] = row.one()
    return changed


async def remove(conn: AsyncConnection, schedule_id: uuid.UUID, *, owner: str | None) -> bool:
    """Delete a schedule (its fire rows go with it; the jobs it created stay)."""
    result = await conn.execute(
        delete(schedules)
        .where(schedules.c.id == schedule_id, _visible(owner))
        .returning(schedules.c.id)
    )
    return result.first() is not None


async def fires(
    conn: AsyncConnection, schedule_id: uuid.UUID, *, before: datetime | None, limit: int
) -> list[Row[Any]]:
    """A schedule's fired ticks, newest first, with the job each created or why it
    created none."""
    query = select(schedule_fires).where(schedule_fires.c.schedule_id == schedule_id)
    if before is not None:
        query = query.where(schedule_fires.c.fire_at < before)
    rows = await conn.execute(query.order_by(schedule_fires.c.fire_at.desc()).limit(limit))
    return list(rows.all())


async def upcoming(conn: AsyncConnection, clock: Clock, *, limit: int) -> list[Row[Any]]:
    """Enabled schedules by next tick (the overdue first), with how overdue each is."""
    overdue = func.greatest(
        0.0, func.extract("epoch", clock.now() - schedules.c.next_fire_at)
    ).label("overdue_seconds")
    rows = await conn.execute(
        select(schedules, overdue)
        .where(schedules.c.enabled)
        .order_by(schedules.c.next_fire_at)
        .limit(limit)
    )
    return list(rows.all())


# -- the scheduler's statements -------------------------------------------------------

# lock_due: the enabled schedules whose next tick has passed, oldest tick first, locked
# so that exactly one scheduler evaluates each (others skip it and take the next); with
# whether the job of the last tick is still unfinished (for ``overlap = 'skip'``).
LOCK_DUE = text(f"""
SELECT s.*, {NOW_SQL} AS db_now,
       (last.finished_at IS NULL AND last.id IS NOT NULL) AS last_job_unfinished
  FROM schedules AS s
  LEFT JOIN jobs AS last ON last.id = s.last_job_id
 WHERE s.enabled AND s.next_fire_at <= {NOW_SQL}
 ORDER BY s.next_fire_at
 LIMIT :limit
   FOR UPDATE OF s SKIP LOCKED
""")

# record_fires: one row per tick; a tick already recorded is not returned, so its job
# is never created twice -- whatever process, restart or race asks.
RECORD_FIRES = text("""
INSERT INTO schedule_fires (schedule_id, fire_at)
SELECT * FROM unnest(CAST(:schedule_id AS uuid[]), CAST(:fire_at AS timestamptz[]))
    ON CONFLICT DO NOTHING
RETURNING schedule_id, fire_at
""")

# refuse_fires: the ticks that created no job, with why (their rows were recorded by
# record_fires in the same transaction).
REFUSE_FIRES = text("""
UPDATE schedule_fires AS f
   SET refusal = CAST(:refusal AS text)
  FROM unnest(CAST(:schedule_id AS uuid[]), CAST(:fire_at AS timestamptz[]))
       AS i(schedule_id, fire_at)
 WHERE f.schedule_id = i.schedule_id AND f.fire_at = i.fire_at
""")

LINK_JOBS = text("""
UPDATE schedule_fires AS f
   SET job_id = i.job_id
  FROM unnest(CAST(:schedule_id AS uuid[]), CAST(:fire_at AS timestamptz[]),
              CAST(:job_id AS uuid[])) AS i(schedule_id, fire_at, job_id)
 WHERE f.schedule_id = i.schedule_id AND f.fire_at = i.fire_at
""")

# advance: where each evaluated schedule starts next time, what it last fired, and what
# it last had refused (and why).
ADVANCE = text(f"""
UPDATE schedules AS s
   SET next_fire_at = i.next_fire_at,
       last_fire_at = COALESCE(i.last_fire_at, s.last_fire_at),
       last_job_id = COALESCE(i.last_job_id, s.last_job_id),
       fired_count = s.fired_count + i.fired,
       refused_count = s.refused_count + i.refused,
       last_refused_at = COALESCE(i.last_refused_at, s.last_refused_at),
       last_refusal = COALESCE(i.last_refusal, s.last_refusal),
       enabled = s.enabled AND i.keep_enabled,
       updated_at = {NOW_SQL}
  FROM unnest(CAST(:id AS uuid[]), CAST(:next_fire_at AS timestamptz[]),
              CAST(:last_fire_at AS timestamptz[]), CAST(:last_job_id AS uuid[]),
              CAST(:fired AS int[]), CAST(:keep_enabled AS boolean[]),
              CAST(:refused AS int[]), CAST(:last_refused_at AS timestamptz[]),
              CAST(:last_refusal AS text[]))
       AS i(id, next_fire_at, last_fire_at, last_job_id, fired, keep_enabled, refused,
            last_refused_at, last_refusal)
 WHERE s.id = i.id
""")

PRUNE_FIRES = text(f"""
DELETE FROM schedule_fires
 WHERE ctid = ANY (ARRAY(SELECT ctid FROM schedule_fires
                          WHERE fire_at < {NOW_SQL} - make_interval(secs => :keep_seconds)
                          LIMIT :limit))
""")


@dataclass(frozen=True, slots=True)
class Advance:
    schedule_id: uuid.UUID
    next_fire_at: datetime
    last_fire_at: datetime | None
    last_job_id: uuid.UUID | None
    fired: int
    keep_enabled: bool = True
    refused: int = 0
    last_refused_at: datetime | None = None
    last_refusal: FireRefusal | None = None


async def lock_due(conn: AsyncConnection, clock: Clock, *, limit: int) -> list[Row[Any]]:
    rows = await conn.execute(LOCK_DUE, {"limit": limit, **clock.bind()})
    return list(rows.all())


async def record_fires(
    conn: AsyncConnection, ticks: Sequence[tuple[uuid.UUID, datetime]]
) -> set[tuple[uuid.UUID, datetime]]:
    """Record ``ticks``; returns those recorded now (the others fired before)."""
    if not ticks:
        return set()
    rows = await conn.execute(
        RECORD_FIRES,
        {"schedule_id": [s for s, _ in ticks], "fire_at": [t for _, t in ticks]},
    )
    return {(row.schedule_id, row.fire_at) for row in rows}


async def link_jobs(
    conn: AsyncConnection, links: Sequence[tuple[uuid.UUID, datetime, uuid.UUID]]
) -> None:
    if links:
        await conn.execute(
            LINK_JOBS,
            {
                "schedule_id": [s for s, _, _ in links],
                "fire_at": [t for _, t, _ in links],
                "job_id": [j for _, _, j in links],
            },
        )


async def refuse_fires(
    conn: AsyncConnection, ticks: Sequence[tuple[uuid.UUID, datetime]], refusal: FireRefusal
) -> None:
    """Record why ``ticks`` (recorded in this transaction) created no job."""
    if ticks:
        await conn.execute(
            REFUSE_FIRES,
            {
                "schedule_id": [s for s, _ in ticks],
                "fire_at": [t for _, t in ticks],
                "refusal": refusal.value,
            },
        )


async def advance(conn: AsyncConnection, moves: Sequence[Advance], clock: Clock) -> None:
    if moves:
        await conn.execute(
            ADVANCE,
            {
                "id": [m.schedule_id for m in moves],
                "next_fire_at": [m.next_fire_at for m in moves],
                "last_fire_at": [m.last_fire_at for m in moves],
                "last_job_id": [m.last_job_id for m in moves],
                "fired": [m.fired for m in moves],
                "keep_enabled": [m.keep_enabled for m in moves],
                "refused": [m.refused for m in moves],
                "last_refused_at": [m.last_refused_at for m in moves],
                "last_refusal": [m.last_refusal for m in moves],
                **clock.bind(),
            },
        )


async def prune_fires(
    conn: AsyncConnection, clock: Clock, *, keep_seconds: float, limit: int
) -> int:
    """Delete up to ``limit`` fire rows older than ``keep_seconds`` (a tick that old is
    behind every schedule's ``next_fire_at``: it can never be evaluated again)."""
    result = await conn.execute(
        PRUNE_FIRES, {"keep_seconds": keep_seconds, "limit": limit, **clock.bind()}
    )
    return int(result.rowcount)
