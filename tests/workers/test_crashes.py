"""Crash recovery: kill -9 rounds, and a stale owner resumed after SIGSTOP."""

from __future__ import annotations

import asyncio
import itertools
import signal
import uuid
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import attempts, job_history, jobs
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import (
    attempt_rows,
    bundle_input,
    create_bundle,
    create_many,
    eventually,
    history,
    job_row,
    wait_all_terminal,
    wait_for,
    wait_for_state,
)
from tests.workers.procs import WorkerProcess

LEASE = 2.0
REAPER = 0.5
SCHEDULING_SLACK = 2.0
"""Allowance for a loaded 2-core CI machine on top of "lease + one reaper interval"."""


async def _running_by_worker(engine: AsyncEngine) -> dict[str, int]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(jobs.c.worker_id, func.count())
            .where(jobs.c.state == JobState.RUNNING.value)
            .group_by(jobs.c.worker_id)
        )
        return {worker: count for worker, count in rows}


@pytest.mark.slow
async def test_kill_9_rounds_lose_no_job_and_publish_none_twice(
    engine: AsyncEngine, make_fleet: MakeFleet
) -> None:
    fleet = make_fleet(lease_seconds=LEASE, reaper_interval_seconds=REAPER, bundle_time_scale=0.05)
    await create_many(engine, "atlas.bundle", [bundle_input("coast")] * 200)
    # One process is never killed, so a reaper is always alive; the others are killed
    # (kill -9: no release, no cleanup) whenever they hold running jobs, and replaced.
    fleet.start("keeper", concurrency=2)
    victims: dict[str, WorkerProcess] = {f"v{n}": fleet.start(f"v{n}") for n in range(2)}
    spawned = len(victims)

    async def holding_victim() -> str | None:
        running = await _running_by_worker(engine)
        holding = sorted(name for name in victims if running.get(name))
        return holding[0] if holding else None

    for _ in range(10):
        victim = await eventually(
            holding_victim, lambda name: name is not None, timeout=60, what="a victim at work"
        )
        assert victim is not None
        victims.pop(victim).kill()
        name = f"v{spawned}"
        spawned += 1
        victims[name] = fleet.start(name)
    rounds = 10

    counts = await wait_all_terminal(engine, timeout=180)
    assert counts == {JobState.SUCCEEDED.value: 200}, fleet.logs()

    async with engine.connect() as conn:
        publishes = _pairs(
            await conn.execute(
                select(job_history.c.job_id, func.count())
                .where(job_history.c.transition == "publish")
                .group_by(job_history.c.job_id)
            )
        )
        tries = (
            await conn.execute(select(attempts).order_by(attempts.c.job_id, attempts.c.number))
        ).all()
    assert len(publishes) == 200
    assert set(publishes.values()) == {1}, "a job was published twice"

    by_job: dict[uuid.UUID, list[Any]] = defaultdict(list)
    for attempt in tries:
        by_job[attempt.job_id].append(attempt)
    lost = [a for a in tries if a.outcome == "lost"]
    assert len(lost) >= rounds, "every kill interrupted at least one running job"
    assert {a.worker_id for a in lost} <= {"keeper"} | {f"v{n}" for n in range(spawned)}
    # The keeper is never killed. On a starved machine it may still miss a beat of this
    # 2 s lease: then it must have noticed (and written nothing more, which the
    # published-once checks below prove), and said so in its log.
    if any(a.worker_id == "keeper" for a in lost):
        [keeper] = [w for w in fleet.processes if w.name == "keeper"]
        noticed = keeper.log()
        assert "lease.lost_while_alive" in noticed or "job.lease_lost" in noticed
    limit = timedelta(seconds=REAPER + SCHEDULING_SLACK)
    for attempt in lost:  # rescued within one reaper interval of its lease running out
        assert attempt.ended_at - attempt.lease_expires_at <= limit, attempt
    for job_attempts in by_job.values():
        assert [a.outcome for a in job_attempts].count("succeeded") == 1
        for earlier, later in itertools.pairwise(job_attempts):
            assert earlier.ended_at <= later.claimed_at


async def _queued(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count()).where(jobs.c.state == JobState.QUEUED.value)
                )
            ).scalar_one()
        )


async def test_a_stale_owner_resumed_after_sigstop_writes_nothing(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, store: FilesystemStore
) -> None:
    fleet = make_fleet(lease_seconds=1.5, reaper_interval_seconds=0.3, bundle_time_scale=0.15)
    job_id = await create_bundle(engine, transitions, "coast")
    stale = fleet.start("stale", concurrency=1)
    row = await wait_for(
        engine,
        job_id,
        lambda r: r.worker_id == "stale" and r.current_stage == "build",
        timeout=60,
    )
    stale_attempt = row.current_attempt_id
    stale.signal(signal.SIGSTOP)

    fleet.start("fresh", concurrency=1)
    done = await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
    assert done.worker_id is None
    stale.signal(signal.SIGCONT)
    await eventually(
        lambda: asyncio.sleep(0, result=stale.log()),
        lambda text: "job.lease_lost" in text,
        timeout=30,
        what="the stale worker noticing its lost lease",
    )

    after = await job_row(engine, job_id)
    assert after.state == JobState.SUCCEEDED.value
    assert after.result_ref == done.result_ref
    assert after.version == done.version  # the stale owner changed nothing
    tries = await attempt_rows(engine, job_id)
    assert [(a.worker_id, a.outcome) for a in tries] == [
        ("stale", "lost"),
        ("fresh", "succeeded"),
    ]
    assert tries[0].id == stale_attempt
    events = await history(engine, job_id)
    rescue = next(e for e in events if e.transition == "rescue")
    assert rescue.actor == "system:reaper"
    assert all(e.seq < rescue.seq for e in events if e.actor == "worker:stale")
    assert stale.alive()
    # Whatever the stale attempt wrote to disk after waking is swept away.
    await wait_for(engine, job_id, lambda _r: store.staged_files(job_id) == [], timeout=15)
    assert store.published_path("alice", job_id, "bundle.zip") is not None


def _pairs(rows: Any) -> dict[Any, int]:
    return {key: count for key, count in rows}


@pytest.mark.slow
async def test_a_job_that_kills_its_worker_every_time_ends_unresolved_after_its_budget(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    """No infinite loop: every attempt dies with its worker (kill -9 while running), the
    reaper charges each lost lease, and once the budget is spent the job is handed to
    an operator as ``unresolved`` (reason ``lease_lost``) -- never dropped, never retried
    forever."""
    fleet = make_fleet(lease_seconds=LEASE, reaper_interval_seconds=REAPER, bundle_time_scale=1.0)
    job_id = await create_bundle(engine, transitions, "coast")
    budget = (await job_row(engine, job_id)).max_attempts
    killed = 0
    for round_number in itertools.count(1):
        assert round_number <= budget + 1, "the job outlived its attempt budget"
        worker = fleet.start(f"victim-{round_number}", concurrency=1)
        row = await wait_for(
            engine,
            job_id,
            lambda r, attempt=killed + 1: (
                r.state == JobState.UNRESOLVED.value
                or (r.state == JobState.RUNNING.value and r.attempt == attempt)
            ),
            timeout=LEASE + REAPER + 30,
        )
        if row.state == JobState.UNRESOLVED.value:
            worker.kill()
            break
        worker.kill()
        killed += 1

    final = await job_row(engine, job_id)
    assert final.reason == "lease_lost"
    assert final.last_error["code"] == "lease_expired"
    assert killed == budget
    outcomes = [a.outcome for a in await attempt_rows(engine, job_id)]
    assert outcomes == ["lost"] * budget
    moves = [(h.transition, h.to_state) for h in await history(engine, job_id)]
    assert moves.count(("rescue", "queued")) == budget - 1
    assert moves[-1] == ("rescue_exhausted", "unresolved")
