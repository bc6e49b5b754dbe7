"""Read queries for the status, history, listing and queue views.

Reads never lock and never change anything. Owner scoping happens *in the query*
(``owner = :owner``), so a job of another owner is indistinguishable from a missing
one: both return ``None``. ``owner=None`` means "any owner" (operators).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    and_,
    bindparam,
    func,
    literal,
    literal_column,
    select,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import INTERVAL
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.external import GET_OPERATION, HAS_TRANSITION
from atlas_jobs._app.db.pages import fetch_size
from atlas_jobs._app.db.queries import KEY_RUNNING
from atlas_jobs._app.db.records import JobRow, job_row, job_rows, maybe_job_row
from atlas_jobs._app.db.schema import (
    JOB_STATUS_COLUMNS,
    api_keys,
    attempts,
    idempotency_keys,
    job_checkpoints,
    job_history,
    job_signals,
    job_stages,
    job_tags,
    jobs,
    worker_processes,
)
from atlas_jobs._app.lifecycle import ACTIVE_STATES, TERMINAL_STATES, JobState, TransitionName


async def get_job(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    owner: str | None,
    now: ColumnElement[datetime] | None = None,
) -> JobRow | None:
    """One job row, or ``None`` when it does not exist or belongs to someone else.

    ``observed_at`` is the database time of the read (``now``: the caller's clock)."""
    query = select(jobs, (now if now is not None else func.now()).label("observed_at")).where(
        jobs.c.id == job_id
    )
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    return maybe_job_row((await conn.execute(query)).first())


# The status read's statement, built once (the hottest read: building a select and its
# cache key per request cost more than the rest of its Python): the status columns only
# (JOB_STATUS_COLUMNS, what the body and its headers are built from), database time as
# Clock.now() gives it, the clock's offset bound as a parameter.
_OBSERVED = (func.now() + bindparam("clock_offset", type_=INTERVAL())).label("observed_at")
_JOB_BY_ID: Select[*tuple[Any, ...]] = select(*JOB_STATUS_COLUMNS, _OBSERVED).where(
    jobs.c.id == bindparam("job_id")
)
_OWNED_JOB_BY_ID = _JOB_BY_ID.where(jobs.c.owner == bindparam("owner"))


async def get_job_now(
    conn: AsyncConnection, job_id: uuid.UUID, *, owner: str | None, clock: Clock
) -> JobRow | None:
    """The status columns (``JOB_STATUS_COLUMNS``) of :func:`get_job` with
    ``now=clock.now()``, from a statement built once: read nothing else of it."""
    query = _JOB_BY_ID if owner is None else _OWNED_JOB_BY_ID
    params: dict[str, Any] = {"job_id": job_id, "clock_offset": clock.offset}
    if owner is not None:
        params["owner"] = owner
    return maybe_job_row((await conn.execute(query, params)).first())


async def get_jobs(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID], *, now: ColumnElement[datetime]
) -> list[JobRow]:
    """Job rows by id, any owner (one query; ids that no longer exist are absent)."""
    if not job_ids:
        return []
    rows = await conn.execute(
        select(jobs, now.label("observed_at")).where(jobs.c.id.in_(list(job_ids)))
    )
    return job_rows(list(rows.all()))


async def download_job(
    conn: AsyncConnection,
    job_id: uuid.UUID,
    *,
    owner: str,
    key_id: uuid.UUID,
    now: ColumnElement[datetime],
) -> JobRow | None:
    """The owner's job for a signed download, or ``None`` when the API key that asked
    for the link has been revoked since (one query)."""
    live_key = (
        select(api_keys.c.id)
        .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
        .exists()
    )
    found = await conn.execute(
        select(jobs, now.label("observed_at")).where(
            jobs.c.id == job_id, jobs.c.owner == owner, live_key
        )
    )
    return maybe_job_row(found.first())


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
    """Up to ``limit`` history rows after ``after_seq``, oldest first, with the attempt's
    number (a page: the caller asks for ``limit + 1`` to know whether another follows)."""
    rows = await conn.execute(
        select(job_history, attempts.c.number.label("attempt_number"))
        .select_from(job_history.outerjoin(attempts, attempts.c.id == job_history.c.attempt_id))
        .where(job_history.c.job_id == job_id, job_history.c.seq > after_seq)
        .order_by(job_history.c.seq)
        .limit(limit)
    )
    return list(rows.all())


async def creation_traceparent(conn: AsyncConnection, job_id: uuid.UUID) -> str | None:
    """The W3C ``traceparent`` the job's creation recorded (tracing on), else None."""
    row = (
        await conn.execute(
            select(job_history.c.data["traceparent"].astext.label("traceparent"))
            .where(
                job_history.c.job_id == job_id,
                job_history.c.transition == TransitionName.CREATE.value,
            )
            .limit(1)
        )
    ).first()
    return None if row is None else row.traceparent


@dataclass(frozen=True, slots=True)
class Submitter:
    """Who submitted a job: the key its creation recorded, and that key's holder."""

    key_id: uuid.UUID
    holder: str | None


async def submitter_of(conn: AsyncConnection, job_id: uuid.UUID) -> Submitter | None:
    """The key (and holder) behind the job's creation or replay, else ``None`` (a job
    no key submitted: a schedule's fire, or one created before keys were recorded).
    The job's first history row, by its primary key."""
    row = (
        await conn.execute(
            select(job_history.c.key_id, api_keys.c.holder)
            .select_from(job_history.join(api_keys, api_keys.c.id == job_history.c.key_id))
            .where(job_history.c.job_id == job_id, job_history.c.from_state.is_(None))
            .order_by(job_history.c.seq)
            .limit(1)
        )
    ).first()
    return None if row is None else Submitter(row.key_id, row.holder)


async def history_tail(conn: AsyncConnection, job_id: uuid.UUID, *, limit: int) -> list[Row[Any]]:
    """The job's last ``limit`` history rows, oldest first (a live feed's first read)."""
    rows = await conn.execute(
        select(job_history, attempts.c.number.label("attempt_number"))
        .select_from(job_history.outerjoin(attempts, attempts.c.id == job_history.c.attempt_id))
        .where(job_history.c.job_id == job_id)
        .order_by(job_history.c.seq.desc())
        .limit(limit)
    )
    return list(reversed(rows.all()))


async def checkpoints(conn: AsyncConnection, job_id: uuid.UUID) -> dict[tuple[str, str], Any]:
    """The durable checkpoints of a job's earlier attempts: ``(stage, unit) -> data``."""
    rows = await conn.execute(
        select(job_checkpoints.c.stage, job_checkpoints.c.unit_name, job_checkpoints.c.data).where(
            job_checkpoints.c.job_id == job_id
        )
    )
    return {(r.stage, r.unit_name): r.data for r in rows}


async def job_states(
    conn: AsyncConnection, job_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, tuple[str, str]]:
    """``(state, delivery_state)`` of each of ``job_ids`` that exists."""
    rows = await conn.execute(
        select(jobs.c.id, jobs.c.state, jobs.c.delivery_state).where(jobs.c.id.in_(list(job_ids)))
    )
    return {r.id: (r.state, r.delivery_state) for r in rows}


async def plan_stages(conn: AsyncConnection, job: JobRow) -> list[Row[Any]]:
    """A job row's stages in plan order; none are read before it has a plan."""
    return (await stages_for(conn, [job.id]))[job.id] if job.plan_revision else []


_STAGES_WITH_VERSION = (
    select(job_stages, jobs.c.version.label("job_version"))
    .join(jobs, jobs.c.id == job_stages.c.job_id)
    .where(job_stages.c.job_id == bindparam("job_id"))
    .order_by(job_stages.c.position)
)


async def plan_stages_of_version(conn: AsyncConnection, job: JobRow) -> list[Row[Any]] | None:
    """:func:`plan_stages`, or ``None`` when the job is no longer at ``job.version``.

    Outside one snapshot (autocommit, read committed) the stages are read by a statement
    after the job's: a change committed in between (progress, a plan expansion) would
    pair the job row of one version with the stages of the next. Each stage row carries
    the job's version as this statement saw it, so the caller can tell and read again."""
    if not job.plan_revision:
        return []
    rows = list((await conn.execute(_STAGES_WITH_VERSION, {"job_id": job.id})).all())
    if rows and rows[0].job_version != job.version:
        return None
    return rows


async def migration_heads(conn: AsyncConnection) -> set[str]:
    """The alembic revisions the database is at."""
    rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
    return {r.version_num for r in rows}


@dataclass(frozen=True, slots=True)
class SeenKey:
    fingerprint: str
    job: JobRow | None


async def idempotency_keys_seen(
    conn: AsyncConnection, owner: str, keys: Sequence[str], *, now: ColumnElement[datetime]
) -> dict[str, SeenKey]:
    """An owner's Idempotency-Keys among ``keys``, each with its job, in one query."""
    rows = await conn.execute(
        select(
            idempotency_keys.c.key.label("seen_key"),
            idempotency_keys.c.fingerprint,
            jobs,
            now.label("observed_at"),
        )
        .select_from(
            idempotency_keys.outerjoin(
                jobs, and_(jobs.c.id == idempotency_keys.c.job_id, jobs.c.owner == owner)
            )
        )
        .where(idempotency_keys.c.owner == owner, idempotency_keys.c.key.in_(list(keys)))
    )
    return {
        row.seen_key: SeenKey(row.fingerprint, job_row(row) if row.id is not None else None)
        for row in rows
    }


async def oldest_claimable_age(conn: AsyncConnection, now: ColumnElement[datetime]) -> float | None:
    """Seconds the oldest claimable job has waited (the first entry of ix_jobs_claimable)."""
    age = await conn.scalar(
        select(func.extract("epoch", now - func.min(jobs.c.available_at))).where(
            jobs.c.state == JobState.QUEUED.value, jobs.c.available_at <= now
        )
    )
    return None if age is None else float(age)


LANES_VIEWED = 10_000
"""The scheduling view reads at most this many lanes (least-served first)."""

# scheduling_view: what the claim's small tables say now -- every lane (least-served first,
# at most LANES_VIEWED) and every concurrency key with no room (at its limit, or out of
# start tokens) -- for the API's view of why a queued job waits. Three reads of small
# tables and the first entry of ix_jobs_claimable; never of the queued jobs themselves.
# A key's running count (KEY_RUNNING: a sum over its release slots) is computed once per
# key, in a LATERAL, and read as ``running`` and for ``at_limit``. Its ``OFFSET 0`` keeps
# the planner from flattening the LATERAL, which would copy the subquery into every
# reference (the output and the WHERE: three sums per key).
_LANES_VIEW = text(f"""
SELECT owner, kind, kind_version, concurrency_key, served
  FROM claim_lanes
 ORDER BY served
 LIMIT {LANES_VIEWED}
""")
_FULL_KEYS_VIEW = text(f"""
SELECT key, limit_, running, rate, period_seconds, at_limit,
       CASE WHEN tokens < 1
            THEN now() + make_interval(secs => (1 - tokens) * period_seconds / rate)
       END AS next_start_at
  FROM (SELECT k.key, COALESCE(k.max_running, k.declared_limit) AS limit_,
               r.running, k.rate, k.period_seconds,
               r.running >= COALESCE(k.max_running, k.declared_limit, 2147483647)
                   AS at_limit,
               LEAST(k.rate::float8, COALESCE(k.tokens, k.rate) + k.rate
                     * extract(epoch FROM now() - COALESCE(k.refilled_at, now()))
                     / k.period_seconds) AS tokens
          FROM concurrency_keys AS k
         CROSS JOIN LATERAL (SELECT {KEY_RUNNING} AS running OFFSET 0) AS r) AS k
 WHERE at_limit OR tokens < 1
""")


Lane = tuple[str, str, int, str]
"""A claim lane: owner, kind, kind version, concurrency key ('' for none)."""


@dataclass(frozen=True, slots=True)
class FullKey:
    """A concurrency key with no room now: at its limit, or out of start tokens."""

    limit: int | None
    running: int
    at_limit: bool
    rate: int | None
    period_seconds: float | None
    next_start_at: datetime | None
    """When its start rate allows the next start (``None``: the rate does not hold it)."""


@dataclass(frozen=True, slots=True)
class SchedulingView:
    lanes: Sequence[tuple[Lane, float]]
    """Lanes, least-served first."""
    full_keys: dict[str, FullKey]
    """Keys with no room, by key."""
    queue_age_seconds: float | None


async def scheduling_view(conn: AsyncConnection, now: ColumnElement[datetime]) -> SchedulingView:
    lanes = [
        ((r.owner, r.kind, int(r.kind_version), r.concurrency_key), float(r.served))
        for r in await conn.execute(_LANES_VIEW)
    ]
    full = {
        r.key: FullKey(
            limit=None if r.limit_ is None else int(r.limit_),
            running=int(r.running),
            at_limit=bool(r.at_limit),
            rate=r.rate,
            period_seconds=r.period_seconds,
            next_start_at=r.next_start_at,
        )
        for r in await conn.execute(_FULL_KEYS_VIEW)
    }
    return SchedulingView(lanes, full, await oldest_claimable_age(conn, now))


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What a listing (or a bulk operation) selects. ``owner`` is the caller's scope
    (``None``: every owner); the other fields narrow it, each a set of accepted values
    (empty: any) or a half-open time range ``[after, before)``."""

    owner: str | None
    states: Sequence[str] = ()
    kinds: Sequence[str] = ()
    owners: Sequence[str] = ()
    tags: Sequence[str] = ()
    """Every one of these tags (``key=value``)."""
    reasons: Sequence[str] = ()
    error_codes: Sequence[str] = ()
    """The code of the job's error, or of its last error while it is not finished."""
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    before_seq: int | None = None
    """The keyset of one owner's walk (:func:`walks_by_id` false): jobs before this seq."""
    before_id: uuid.UUID | None = None
    """The keyset of a walk across owners (:func:`walks_by_id`): jobs before this id."""
    limit: int = 20


def single_owner(page: JobFilter) -> str | None:
    """The one owner a filter selects, if it selects exactly one."""
    if page.owner is not None:
        return page.owner
    return page.owners[0] if len(set(page.owners)) == 1 else None


def walks_by_id(page: JobFilter) -> bool:
    """Whether a filter's jobs are walked by ``id`` (``pk_jobs``, or ``ix_jobs_attention``
    for its states) rather than by ``(owner, seq)`` (``ix_jobs_owner_seq``): every filter
    that does not select exactly one owner. Job ids are UUIDv7, so id order is creation
    order; there is no index on ``seq`` alone (each one costs every job version an entry)."""
    return single_owner(page) is None


def _one_owner(owner: str) -> list[ColumnElement[bool]]:
    """``owner = :owner`` written as the closed range ``[owner, owner]``: the same rows,
    but the planner keeps ``owner`` in the listing's ``ORDER BY owner, seq`` (an
    equality would make it a constant and drop it), so only ``ix_jobs_owner_seq`` gives
    that order. A backward walk of ``pk_jobs``, filtering other owners' rows until a
    page is found, is never chosen for one owner's page."""
    return [jobs.c.owner >= owner, jobs.c.owner <= owner]


def walked_tag(page: JobFilter) -> str | None:
    """The tag whose ``job_tags`` rows a filter's walk follows, if any: the first of its
    tags when the walk is across owners (:func:`walks_by_id`). ``job_tags``' primary key
    ``(tag, job_id)`` gives that tag's jobs in id order, so the walk reads a page of them
    and joins each job by ``pk_jobs``; the filter's other tags are checked on the job's
    row. One owner's tag search walks ``ix_jobs_owner_seq`` and checks the tags on the
    way: it reads at most that owner's jobs."""
    if page.tags and walks_by_id(page):
        return sorted(set(page.tags))[0]
    return None


def walk_id(page: JobFilter) -> ColumnElement[uuid.UUID]:
    """The column a walk across owners is keyed and ordered on: ``job_tags.job_id`` for a
    tag's walk (an inequality on ``jobs.id`` would not reach that index: the planner only
    carries equalities across the join), else ``jobs.id``."""
    return job_tags.c.job_id if walked_tag(page) is not None else jobs.c.id


def walk_from(page: JobFilter, query: Select[Any]) -> Select[Any]:
    """``query`` (of ``jobs``) read through ``job_tags`` for a tag's walk
    (:func:`walked_tag`): ``job_tags JOIN jobs`` on the job's id, the walked tag's rows
    only. Any other filter is returned as it is."""
    tag = walked_tag(page)
    if tag is None:
        return query
    return query.join_from(job_tags, jobs, job_tags.c.job_id == jobs.c.id).where(
        job_tags.c.tag == tag
    )


def job_conditions(page: JobFilter) -> list[ColumnElement[bool]]:
    """The WHERE of a filter on ``jobs``, shaped for the search indexes: states are
    literals (from the lifecycle's vocabulary, never input) so the planner can prove the
    partial index ``ix_jobs_attention`` covers them, and one owner is an equality
    (``ix_jobs_owner_seq``). Tags are checked on the job's row; across owners the walk
    follows one of them in ``job_tags`` (:func:`walk_from`)."""
    conditions: list[ColumnElement[bool]] = []
    owners = sorted({*page.owners, *([page.owner] if page.owner is not None else [])})
    only = single_owner(page)
    if only is not None:
        conditions.extend(_one_owner(only))
        if page.owner is not None and page.owners and page.owner not in page.owners:
            conditions.append(literal(False))
    elif owners:
        conditions.append(jobs.c.owner.in_(owners))
    if page.states:
        states = sorted({JobState(s).value for s in page.states})
        conditions.append(jobs.c.state.in_([literal_column(f"'{s}'") for s in states]))
    if page.kinds:
        conditions.append(jobs.c.kind.in_(sorted(set(page.kinds))))
    if page.tags:
        conditions.append(jobs.c.tags.contains(sorted(set(page.tags))))
    if page.reasons:
        conditions.append(jobs.c.reason.in_(sorted(set(page.reasons))))
    if page.error_codes:
        code = func.coalesce(jobs.c.error, jobs.c.last_error)["code"].astext
        conditions.append(code.in_(sorted(set(page.error_codes))))
    if page.created_after is not None:
        conditions.append(jobs.c.created_at >= page.created_after)
    if page.created_before is not None:
        conditions.append(jobs.c.created_at < page.created_before)
    if page.finished_after is not None:
        conditions.append(jobs.c.finished_at >= page.finished_after)
    if page.finished_before is not None:
        conditions.append(jobs.c.finished_at < page.finished_before)
    return conditions


async def list_jobs(
    conn: AsyncConnection, page: JobFilter, *, now: ColumnElement[datetime] | None = None
) -> list[JobRow]:
    """The jobs a filter selects, newest first, keyset-paginated: one owner's on ``seq``
    (``before_seq``), across owners on ``id`` (``before_id``; :func:`walks_by_id`).
    Stable under inserts: a new job has a larger ``seq`` and a larger id (UUIDv7) than
    every page already read.

    Fetches ``limit + 1`` rows so the caller knows whether another page exists."""
    rows = await conn.execute(
        listing_query(
            page, select(jobs, (now if now is not None else func.now()).label("observed_at"))
        )
    )
    return job_rows(list(rows.all()))


def listing_query(page: JobFilter, columns: Select[Any]) -> Select[Any]:
    """``columns`` narrowed to a listing's page: the filter, the cursor, newest first --
    one owner's page in ``(owner, seq)`` order (``ix_jobs_owner_seq``, read backwards),
    a page across owners in ``id`` order (``pk_jobs``, ``ix_jobs_attention`` or, for a
    tag, ``job_tags``' primary key, read backwards). The keyset of the other walk, if
    set, is ignored: the caller matches the cursor to the walk (:func:`walks_by_id`)."""
    conditions = job_conditions(page)
    order: tuple[ColumnElement[Any], ...]
    if walks_by_id(page):
        key = walk_id(page)
        if page.before_id is not None:
            conditions.append(key < page.before_id)
        order = (key.desc(),)
    else:
        if page.before_seq is not None:
            conditions.append(jobs.c.seq < page.before_seq)
        order = (jobs.c.owner.desc(), jobs.c.seq.desc())
    query = walk_from(page, columns).where(and_(true(), *conditions))
    return query.order_by(*order).limit(fetch_size(page.limit))


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


async def queue_gauges(conn: AsyncConnection, now: ColumnElement[datetime]) -> list[Row[Any]]:
    """Unfinished jobs per kind and state with, for queued ones, the seconds the oldest
    *claimable* job has waited (``available_at`` passed; a retry waiting out its backoff
    is not late yet). One statement over unfinished rows only (the predicate of the
    partial index ``ix_jobs_owner_active``): finished jobs, however many, cost nothing.
    The metrics sampler runs it on a cadence, never per scrape."""
    claimable = and_(jobs.c.state == JobState.QUEUED.value, jobs.c.available_at <= now)
    rows = await conn.execute(
        select(
            jobs.c.kind,
            jobs.c.state,
            func.count().label("job_count"),
            func.extract("epoch", now - func.min(jobs.c.available_at).filter(claimable)).label(
                "oldest_claimable_age"
            ),
        )
        .where(jobs.c.state.notin_([s.value for s in TERMINAL_STATES]))
        .group_by(jobs.c.kind, jobs.c.state)
    )
    return list(rows.all())


async def live_workers(
    conn: AsyncConnection, now: ColumnElement[datetime], *, window_seconds: float
) -> dict[str, int]:
    """How many live worker processes serve each ``kind@version`` key: those whose
    registry heartbeat is at most ``window_seconds`` old at ``now``. One statement over
    the registry's few rows (one per worker process)."""
    key = func.unnest(worker_processes.c.serves).label("key")
    listed = (
        select(worker_processes.c.worker_id, key)
        .where(
            worker_processes.c.heartbeat_at
            >= now - literal(timedelta(seconds=window_seconds), INTERVAL())
        )
        .subquery()
    )
    rows = await conn.execute(
        select(
            listed.c.key, func.count(func.distinct(listed.c.worker_id)).label("workers")
        ).group_by(listed.c.key)
    )
    return {row.key: int(row.workers) for row in rows}


__all__ = [
    "JobFilter",
    "QueueLine",
    "SeenKey",
    "checkpoints",
    "download_job",
    "get_job",
    "get_version",
    "history",
    "idempotency_keys_seen",
    "job_states",
    "list_jobs",
    "live_workers",
    "migration_heads",
    "oldest_claimable_age",
    "plan_stages",
    "queue_gauges",
    "queue_view",
    "scheduling_view",
    "single_owner",
    "stages_for",
    "walk_from",
    "walk_id",
    "walked_tag",
    "walks_by_id",
]


async def operation(conn: AsyncConnection, operation_id: uuid.UUID) -> Row[Any] | None:
    """One external operation's record (what an attempt knows before calling again)."""
    return (await conn.execute(GET_OPERATION, {"id": operation_id})).first()


async def has_transition(conn: AsyncConnection, job_id: uuid.UUID, name: TransitionName) -> bool:
    """Whether the job ever made the move ``name`` (e.g. was approved)."""
    row = (await conn.execute(HAS_TRANSITION, {"job_id": job_id, "name": name.value})).first()
    return bool(row and row.found)


async def signal_since_last_wait(conn: AsyncConnection, job_id: uuid.UUID) -> Row[Any] | None:
    """The newest signal received since the job last began to wait for an external
    event (``event_id``, ``data``), or ``None``: not waited yet, or no signal since."""
    began = (
        select(func.max(job_history.c.at))
        .where(
            job_history.c.job_id == job_id,
            job_history.c.to_state == JobState.WAITING.value,
            job_history.c.reason == "external",
        )
        .scalar_subquery()
    )
    query: Select[Any] = (
        select(job_signals.c.event_id, job_signals.c.data)
        .where(job_signals.c.job_id == job_id, job_signals.c.received_at >= began)
        .order_by(job_signals.c.received_at.desc())
        .limit(1)
    )
    found: Row[Any] | None = (await conn.execute(query)).first()
    return found
