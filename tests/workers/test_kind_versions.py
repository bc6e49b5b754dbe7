"""Deploying a new version of a kind while its jobs run, on real worker processes.

Every job records the ``kind_version`` it was accepted with, and a worker claims only
the ``name@version`` keys it serves: each version it declares, and the older versions a
declaration lists in ``compatible_versions``. So during a rolling deploy:

* jobs of ``demo.slow@1`` -- running on a v1 worker, and queued -- are never claimed by a
  worker whose ``demo.slow`` is version 2 without compatibility: they stay queued for a
  v1 worker, which finishes every one of them;
* a ``demo.slow@2`` job runs on the v2 worker only (the v1 worker does not serve v2);
* a v2 declaring ``compatible_versions={1}`` runs the v1 jobs left once the last v1
  worker is gone, with its own (v2) handler.

The database says who ran what: each attempt's ``worker_id``, the history's ``worker:``
actors, and the result reference each handler records (which handler ran the job).
"""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import jobs
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import NewJob, Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import CLIENT, attempt_rows, eventually, history, job_row, wait_for_state
from tests.workers.procs import Fleet, WorkerProcess

KIND = "demo.slow"
PAUSE = 0.1

MODULE = '''
"""demo.slow {label}."""

from pathlib import Path

from pydantic import BaseModel

from atlas_jobs import Context, Result, RetryPolicy, kind

GATE = Path({gate!r})


class Slow(BaseModel):
    pause: float


@kind(
    "{kind}",
    version={version},
    input=Slow,
    compatible_versions={compatible!r},
    retry=RetryPolicy(attempts=3, backoff_base_seconds=0.1, backoff_cap_seconds=0.1),
    timeout=60,
)
async def slow(ctx: Context[Slow]) -> Result:
    while {gated} and not GATE.exists():  # the test holds v1 jobs running until it opens
        await ctx.sleep(0.05)
    await ctx.sleep(ctx.input.pause)
    return Result(reference={{"handler": "{label}"}})
'''


def kinds_modules(root: Path, gate: Path) -> Path:
    """``v1``, ``v2`` (no compatibility) and ``v2_compatible`` (runs v1 jobs too)."""
    where = root / "kinds"
    where.mkdir()
    for module, label, version, compatible in (
        ("v1", "v1", 1, set()),
        ("v2", "v2", 2, set()),
        ("v2_compatible", "v2-compatible", 2, {1}),
    ):
        text = MODULE.format(
            label=label,
            gate=str(gate),
            kind=KIND,
            version=version,
            compatible=compatible or set(),
            gated=version == 1,
        )
        (where / f"{module}.py").write_text(textwrap.dedent(text).lstrip())
    return where


def start(fleet: Fleet, kinds: Path, module: str, name: str, concurrency: int) -> WorkerProcess:
    fleet.extra_env = {
        "PYTHONPATH": str(kinds),
        "ATLAS_KINDS": module,
        "ATLAS_BUILTIN_KINDS": "false",
        "ATLAS_KIND_ENTRY_POINTS": "false",
    }
    return fleet.start(name, concurrency=concurrency)


async def create(engine: AsyncEngine, transitions: Transitions, version: int) -> uuid.UUID:
    new = NewJob(
        owner="alice",
        kind=KIND,
        kind_version=version,
        input={"pause": PAUSE},
        max_attempts=3,
        max_elapsed_seconds=3600,
    )
    async with engine.begin() as conn:
        created = await transitions.create(conn, new, actor=CLIENT)
    job_id: uuid.UUID = created.job.id
    return job_id


async def states(engine: AsyncEngine, ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(ids)))
        return {row.id: row.state for row in rows}


async def ran_by(engine: AsyncEngine, job_id: uuid.UUID) -> dict[str, Any]:
    """Who ran the job, as the database recorded it."""
    row = await job_row(engine, job_id)
    return {
        "state": row.state,
        "kind_version": row.kind_version,
        "attempt_workers": [a.worker_id for a in await attempt_rows(engine, job_id)],
        "worker_actors": sorted(
            {h.actor for h in await history(engine, job_id) if h.actor.startswith("worker:")}
        ),
        "handler": (row.result_ref or {}).get("handler"),
    }


def only(worker: str, handler: str, version: int) -> dict[str, Any]:
    return {
        "state": JobState.SUCCEEDED.value,
        "kind_version": version,
        "attempt_workers": [worker],
        "worker_actors": [f"worker:{worker}"],
        "handler": handler,
    }


async def test_a_new_version_never_takes_the_old_versions_jobs_unless_compatible(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    kinds = kinds_modules(tmp_path, gate)
    # No prefetch: jobs a worker cannot start yet stay queued in the database.
    fleet = make_fleet(prefetch=0, poll_interval_seconds=0.2)

    # v1 is deployed; six v1 jobs: two run on the v1 worker (held), four wait queued.
    old = [await create(engine, transitions, 1) for _ in range(6)]
    v1 = start(fleet, kinds, "v1", "w-v1", concurrency=2)
    await eventually(
        lambda: states(engine, old),
        lambda found: sorted(found.values()).count(JobState.RUNNING.value) == 2,
        timeout=60,
        what="two v1 jobs running on the v1 worker",
    )

    # v2 rolls out beside it: it runs the v2 job, and leaves the v1 jobs alone.
    v2 = start(fleet, kinds, "v2", "w-v2", concurrency=4)
    new = await create(engine, transitions, 2)
    await wait_for_state(engine, new, JobState.SUCCEEDED, timeout=60)
    await asyncio.sleep(1.0)  # several claim rounds of the v2 worker
    waiting = await states(engine, old)
    assert sorted(waiting.values()) == ["queued"] * 4 + ["running"] * 2, fleet.logs()
    assert await ran_by(engine, new) == only("w-v2", "v2", 2)

    gate.touch()  # the v1 worker finishes every v1 job, and only it
    for job_id in old:
        await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
        assert await ran_by(engine, job_id) == only("w-v1", "v1", 1), fleet.logs()

    # The last v1 worker leaves; v1 jobs still arrive (a client, a schedule, a retry).
    assert v1.terminate() == 0, v1.log()
    late = [await create(engine, transitions, 1) for _ in range(3)]
    await asyncio.sleep(1.0)
    assert set((await states(engine, late)).values()) == {"queued"}, v2.log()

    # A v2 that declares v1 compatible runs them, with its own handler.
    start(fleet, kinds, "v2_compatible", "w-v2c", concurrency=4)
    for job_id in late:
        await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
        assert await ran_by(engine, job_id) == only("w-v2c", "v2-compatible", 1), fleet.logs()
    assert v2.alive(), v2.log()
