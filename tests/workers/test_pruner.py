"""The pruner (:mod:`atlas_jobs._workers.pruner`): which finished jobs go, in bounded batches, and
that it runs beside working pools without deadlocks. Time moves with the test clock."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.queries import PRUNE_FINISHED
from atlas_jobs._app.db.schema import attempts, idempotency_keys, job_history, jobs
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, Transitions
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import PermanentError
from atlas_jobs._workers.handlers.base import NO_FILES, PublishPlan
from atlas_jobs._workers.pool import WorkerPool
from atlas_jobs._workers.pruner import Pruner
from atlas_jobs._workers.sweeper import Sweeper
from tests.factory import JobFactory
from tests.workers.bulk import BULK_FINISHED, BULK_QUEUED
from tests.workers.inprocess import KEY, Harness, bounded, until

KEEP = 100.0  # seconds a finished job is kept in these tests
OPERATOR = Actor("operator", "op-1")


async def _present(engine: AsyncEngine, job_ids: list[uuid.UUID]) -> set[uuid.UUID]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(jobs.c.id).where(jobs.c.id.in_(job_ids)))
        return {row.id for row in rows}


async def _owned_rows(engine: AsyncEngine, job_id: uuid.UUID) -> tuple[int, int, int]:
    """History, attempt and idempotency-key rows that belong to a job."""
    async with engine.connect() as conn:
        counts = []
        for table in (job_history, attempts, idempotency_keys):
            query = select(func.count()).select_from(table).where(table.c.job_id == job_id)
            counts.append(int((await conn.execute(query)).scalar_one()))
    return counts[0], counts[1], counts[2]


async def test_prunes_exactly_the_finished_jobs_past_retention(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    old_failed = await jobs.make(JobState.FAILED)
    old_canceled = await jobs.make(JobState.CANCELED)
    old_expired = await jobs.make(JobState.SUCCEEDED)  # result ttl 60 s
    old_available = await jobs.make(JobState.SUCCEEDED)  # never expired by a sweeper
    original = await jobs.make(JobState.FAILED)
    async with engine.begin() as conn:
        replay = await transitions.replay(conn, original.id, actor=OPERATOR)
    assert replay.job is not None
    unfinished = [
        await jobs.make(state)
        for state in (
            JobState.QUEUED,
            JobState.RUNNING,
            JobState.WAITING,
            JobState.UNRESOLVED,
            JobState.CANCEL_REQUESTED,
        )
    ]
    clock.advance(KEEP + 61)
    async with engine.begin() as conn:  # the sweeper's expiry, for one of the two
        await transitions.expire_results(conn, [old_expired.id])
    recent = await jobs.make(JobState.FAILED)
    kept = [old_available.id, original.id, replay.job.id, recent.id]
    kept += [j.id for j in unfinished]
    before = {job_id: await _owned_rows(engine, job_id) for job_id in kept}
    gone = [old_failed.id, old_canceled.id, old_expired.id]
    owned = [await _owned_rows(engine, job_id) for job_id in gone]
    assert [(history > 0, attempts > 0) for history, attempts, _ in owned] == [
        (True, True),
        (True, False),  # canceled while queued: never claimed
        (True, True),
    ], owned

    report = await Pruner(engine, clock, keep_seconds=KEEP).run_once()

    assert (report.pruned, report.batches) == (3, 1)
    assert await _present(engine, gone) == set()
    for job_id in gone:  # history and attempts go with the job
        assert await _owned_rows(engine, job_id) == (0, 0, 0)
    assert await _present(engine, kept) == set(kept)
    for job_id in kept:  # and nothing of what stays is touched
        assert await _owned_rows(engine, job_id) == before[job_id]
    # The replay finishes and ages: it goes first, its original on the next pass
    # (the original's row is what the replay points at).
    async with engine.begin() as conn:
        assert (await transitions.request_cancel(conn, replay.job.id, actor=OPERATOR)).ok
    clock.advance(KEEP + 1)
    pruner = Pruner(engine, clock, keep_seconds=KEEP)
    assert (await pruner.run_once()).pruned == 2  # the replay and the recent job
    assert await _present(engine, [original.id, replay.job.id]) == {original.id}
    assert (await pruner.run_once()).pruned == 1
    assert await _present(engine, [original.id, replay.job.id, recent.id]) == set()
    assert await _present(engine, [old_available.id]) == {old_available.id}


JOB_TAGS = text("SELECT job_id, tag FROM job_tags ORDER BY job_id, tag")
ORPHAN_TAGS = text("""
SELECT count(*) FROM job_tags AS t WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = t.job_id)
""")


async def test_pruning_deletes_the_jobs_tag_rows_and_only_theirs(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    """A tagged job's ``job_tags`` rows (the tag search's side table, written by its
    creation -- a replay's too, which copies the tags) go with the job in the pruner's
    statement: no orphan row is left, and every row of a job that stays is kept."""
    doomed = [
        await jobs.make(JobState.FAILED, tags=("batch=1", "team=a")),
        await jobs.make(JobState.CANCELED, tags=("batch=1",)),
        await jobs.make(JobState.FAILED),
    ]
    original = await jobs.make(JobState.FAILED, tags=("batch=2",))
    async with engine.begin() as conn:
        replay = await transitions.replay(conn, original.id, actor=OPERATOR)
    assert replay.job is not None
    live = await jobs.make(JobState.QUEUED, tags=("batch=1", "team=b"))
    async with engine.connect() as conn:
        before = {(row.job_id, row.tag) for row in await conn.execute(JOB_TAGS)}
    assert (replay.job.id, "batch=2") in before  # the replay's creation wrote its rows
    assert len(before) == 7
    clock.advance(KEEP + 1)

    report = await Pruner(engine, clock, keep_seconds=KEEP, batch_size=2).run_once()

    assert report.pruned == 3  # the original stays: its replay points at it
    async with engine.connect() as conn:
        after = {(row.job_id, row.tag) for row in await conn.execute(JOB_TAGS)}
        assert (await conn.execute(ORPHAN_TAGS)).scalar_one() == 0
    kept = {original.id, replay.job.id, live.id}
    assert after == {row for row in before if row[0] in kept}
    assert not {row[0] for row in after} & {d.id for d in doomed}


ORPHAN_HISTORY = text("""
SELECT count(*) FROM job_history AS h WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = h.job_id)
""")
HISTORY_FOREIGN_KEYS = text("""
SELECT count(*) FROM pg_constraint WHERE conrelid = 'job_history'::regclass AND contype = 'f'
""")


async def test_pruning_leaves_no_orphan_history_rows(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    """``job_history`` has no foreign key (revision f1a2b3c4d5e6), so nothing cascades:
    the pruner deletes the history itself, every row of every pruned job -- creation,
    claim, ending, and the late cancels recorded after the job finished -- in batches
    smaller than the jobs pruned, and not one row of a job that stays."""
    finished = [await jobs.make(state) for state in (JobState.FAILED, JobState.CANCELED) * 3]
    async with engine.begin() as conn:  # late cancels: history rows after the ending
        for made in finished[:2]:
            assert not (await transitions.request_cancel(conn, made.id, actor=OPERATOR)).ok
    staying = await jobs.make(JobState.RUNNING)
    async with engine.connect() as conn:
        assert (await conn.execute(HISTORY_FOREIGN_KEYS)).scalar_one() == 0
        rows_before = {m.id: (await _owned_rows(engine, m.id))[0] for m in [*finished, staying]}
    assert all(n >= 2 for n in rows_before.values())  # create + claim/ending at least
    assert rows_before[finished[0].id] > rows_before[finished[2].id]  # the late cancel's row
    clock.advance(KEEP + 1)

    report = await Pruner(engine, clock, keep_seconds=KEEP, batch_size=4).run_once()

    assert (report.pruned, report.batches) == (len(finished), 2)
    async with engine.connect() as conn:
        assert (await conn.execute(ORPHAN_HISTORY)).scalar_one() == 0
    for made in finished:
        assert await _owned_rows(engine, made.id) == (0, 0, 0)
    assert (await _owned_rows(engine, staying.id))[0] == rows_before[staying.id]


async def test_prunes_in_bounded_batches(
    engine: AsyncEngine, clock: Clock, jobs: JobFactory
) -> None:
    made = [await jobs.make(JobState.FAILED) for _ in range(5)]
    clock.advance(KEEP + 1)
    pruner = Pruner(engine, clock, keep_seconds=KEEP, batch_size=2)

    assert await pruner._batch() == 2  # one statement deletes at most batch_size
    report = await pruner.run_once()

    assert (report.pruned, report.batches) == (3, 2)  # 2 + 1
    assert pruner.total == 5  # every committed batch counts
    assert await _present(engine, [m.id for m in made]) == set()


async def test_a_job_row_held_by_another_transaction_is_skipped_not_waited_on(
    engine: AsyncEngine, clock: Clock, jobs: JobFactory
) -> None:
    held, free = await jobs.make(JobState.FAILED), await jobs.make(JobState.FAILED)
    clock.advance(KEEP + 1)
    pruner = Pruner(engine, clock, keep_seconds=KEEP)
    async with engine.connect() as other:
        await other.execute(text("SELECT 1 FROM jobs WHERE id = :id FOR UPDATE"), {"id": held.id})
        assert (await bounded(pruner.run_once())).pruned == 1  # SKIP LOCKED: no wait
        assert await _present(engine, [held.id, free.id]) == {held.id}
        await other.rollback()
    assert (await pruner.run_once()).pruned == 1


async def test_the_sweeper_prunes_after_expiring_results(
    engine: AsyncEngine,
    clock: Clock,
    transitions: Transitions,
    jobs: JobFactory,
    store: FilesystemStore,
) -> None:
    succeeded = await jobs.make(JobState.SUCCEEDED)  # result ttl 60 s
    clock.advance(61 + KEEP)
    pruner = Pruner(engine, clock, keep_seconds=KEEP)

    report = await Sweeper(engine, transitions, store, pruner=pruner).run_once()

    assert (report.expired, report.pruned) == (1, 1)
    assert await _present(engine, [succeeded.id]) == set()


async def test_pruning_beside_a_working_pool_takes_only_finished_jobs_and_never_deadlocks(
    harness: Harness, settings: Settings, database_url: str, engine: AsyncEngine, clock: Clock
) -> None:
    """Half the jobs fail (prunable at once with no retention), half succeed (their
    results stay downloadable, so they are never pruned). A pruner loops with small
    batches while the pool claims, runs and finishes jobs on other connections; a
    deadlock or a pruned unfinished job would show as an error, a job run twice or a
    succeeded job missing."""
    n = 40
    job_ids = [await harness.create() for _ in range(n)]
    failing = set(job_ids[::2])
    runs: list[uuid.UUID] = []

    async def handler(ctx: JobContext) -> PublishPlan:
        runs.append(ctx.job_id)
        await asyncio.sleep(0)
        if ctx.job_id in failing:
            raise PermanentError("bad_input", "this one fails")
        return NO_FILES

    pool = WorkerPool(
        settings,
        database_url=database_url,
        concurrency=4,
        worker_id="w-prune",
        handlers={KEY: handler},
        clock=clock,
    )
    pruner = Pruner(engine, clock, keep_seconds=0, batch_size=2)
    stop = asyncio.Event()
    task = asyncio.create_task(pool.run(stop))

    async def prune_while_working() -> int:
        passes = 0
        while not stop.is_set():
            await pruner.run_once()
            passes += 1
            await asyncio.sleep(0.01)
        return passes

    pruning = asyncio.create_task(prune_while_working())
    succeeded = [j for j in job_ids if j not in failing]

    async def settled() -> tuple[int, set[uuid.UUID]]:
        async with engine.connect() as conn:
            count = (await conn.execute(select(func.count()).select_from(jobs))).scalar_one()
        return int(count), await _present(engine, succeeded)

    def done(state: tuple[int, set[uuid.UUID]]) -> bool:
        count, present = state
        return count == len(succeeded) and present == set(succeeded)

    try:
        await until(settled, done)
    finally:
        stop.set()
        await bounded(task)
        passes = await bounded(pruning)

    assert task.result() is None
    assert passes >= 1
    assert sorted(runs) == sorted(job_ids)  # each job ran exactly once
    assert pruner.total == len(failing)
    async with engine.connect() as conn:  # pruned beside live moves: no history left behind
        assert (await conn.execute(ORPHAN_HISTORY)).scalar_one() == 0
    for job_id in succeeded:
        row: Any = await harness.row(job_id)
        assert (row.state, row.delivery_state) == ("succeeded", "available")
        assert [m[0] for m in await harness.moves(job_id)] == ["create", "claim", "publish"]


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


async def test_the_pruning_statement_walks_its_partial_index(engine: AsyncEngine) -> None:
    """Among many unfinished jobs, the pruner walks ix_jobs_prunable in order (live work
    is not in it) and stops at LIMIT: no sequential scan, no sort of every prunable row,
    and the DELETE finds its rows by primary key -- the jobs' and their job_tags rows."""
    async with engine.begin() as conn:
        await conn.execute(BULK_QUEUED, {"kind": "atlas.noop", "n": 20_000})
        await conn.execute(BULK_FINISHED, {"n": 2_000})
        # the live jobs' tags: job_tags is large, the doomed jobs' rows a few of it
        await conn.execute(
            text(
                "INSERT INTO job_tags (tag, job_id)"
                " SELECT 'batch=' || (seq % 100), id FROM jobs WHERE finished_at IS NULL"
            )
        )
        await conn.execute(text("ANALYZE jobs, job_tags"))
    async with engine.connect() as conn:
        explained = (
            await conn.execute(
                text("EXPLAIN (FORMAT JSON) " + PRUNE_FINISHED.text),
                {"keep_seconds": 0.0, "limit": 1000, "clock_offset": 0.0},
            )
        ).scalar_one()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    nodes = _plan_nodes(plan)
    scans = [n for n in nodes if n.get("Relation Name") == "jobs"]
    kinds = {n["Node Type"] for n in nodes}
    assert not kinds & {"Seq Scan", "Sort", "Hash Join"}, kinds
    [walk] = [n for n in scans if n.get("Index Name") == "ix_jobs_prunable"]
    assert walk["Node Type"] == "Index Scan", walk  # in finished_at order
    assert any(n.get("Index Name") == "pk_jobs" for n in nodes), nodes
    assert any(n.get("Index Name") == "pk_job_tags" for n in nodes), nodes
