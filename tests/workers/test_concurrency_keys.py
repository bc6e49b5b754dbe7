"""Concurrency keys hold across real worker processes.

Two worker processes with room for four jobs each run jobs of ``demo.press``, which
declares ``Concurrency(limit=2)`` (every job shares the key ``press``), and of
``demo.export``, whose jobs each name a customer's key (``per_job``, limit 1). The
database's record says how many ran at once: the history's moves into and out of
``running``/``cancel_requested`` in the order they were written (``seq`` is assigned as
each row is written, so a claim that used a slot another job freed comes after that
job's end), checked against the attempts rows. Per key it never goes above the limit --
and reaches it, so the limit, not a lack of work, is what held them.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.queries import KEY_RUNNING
from atlas_jobs._app.fairness import job_key
from atlas_jobs._app.transitions import NewJob, Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import CLIENT, wait_all_terminal

MODULE = '''
"""Kinds with concurrency limits."""

from pydantic import BaseModel

from atlas_jobs import Concurrency, Context, Result, kind


class Work(BaseModel):
    pause: float


@kind("demo.press", input=Work, concurrency=Concurrency(limit=2, key="press"), timeout=60)
async def press(ctx: Context[Work]) -> Result:
    await ctx.sleep(ctx.input.pause)
    return Result()


@kind("demo.export", input=Work, concurrency=Concurrency(limit=1, per_job=True), timeout=60)
async def export(ctx: Context[Work]) -> Result:
    await ctx.sleep(ctx.input.pause)
    return Result()
'''

ACTIVE = ("running", "cancel_requested")
RUNNING_PER_KEY = text("""
SELECT j.concurrency_key AS key, h.seq, h.from_state, h.to_state
  FROM job_history AS h JOIN jobs AS j ON j.id = h.job_id
 WHERE j.concurrency_key <> ''
   AND (h.from_state IN ('running', 'cancel_requested')
        OR h.to_state IN ('running', 'cancel_requested'))
 ORDER BY h.seq
""")
ATTEMPTS_PER_KEY = text("""
SELECT j.concurrency_key AS key, count(*) AS attempts
  FROM attempts AS a JOIN jobs AS j ON j.id = a.job_id
 WHERE j.concurrency_key <> ''
 GROUP BY 1
""")


def job(kind: str, key: str, limit: int) -> NewJob:
    return NewJob(
        owner="alice",
        kind=kind,
        kind_version=1,
        input={"pause": 0.25},
        max_attempts=3,
        max_elapsed_seconds=3600,
        concurrency_key=key,
        concurrency_limit=limit,
    )


async def most_at_once(engine: AsyncEngine) -> dict[str, int]:
    running: dict[str, int] = defaultdict(int)
    most: dict[str, int] = defaultdict(int)
    async with engine.connect() as conn:
        for row in await conn.execute(RUNNING_PER_KEY):
            was, now = row.from_state in ACTIVE, row.to_state in ACTIVE
            running[row.key] += int(now) - int(was)
            most[row.key] = max(most[row.key], running[row.key])
    return dict(most)


async def test_no_key_ever_runs_more_jobs_than_its_limit_across_worker_processes(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, tmp_path: Path
) -> None:
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    (kinds / "limited.py").write_text(textwrap.dedent(MODULE).lstrip())
    customers = [job_key("demo.export", c) for c in ("c1", "c2")]
    batch = [job("demo.press", "press", 2) for _ in range(16)] + [
        job("demo.export", key, 1) for key in customers for _ in range(4)
    ]
    async with engine.begin() as conn:
        await transitions.create_many(conn, batch, actor=CLIENT)
    fleet = make_fleet(poll_interval_seconds=0.1)
    fleet.extra_env = {
        "PYTHONPATH": str(kinds),
        "ATLAS_KINDS": "limited",
        "ATLAS_BUILTIN_KINDS": "false",
        "ATLAS_KIND_ENTRY_POINTS": "false",
    }
    workers = [fleet.start(f"w-limit-{n}", concurrency=4) for n in range(2)]
    counts = await wait_all_terminal(engine, timeout=120)
    assert counts == {"succeeded": len(batch)}, fleet.logs()
    assert all(w.alive() for w in workers), fleet.logs()

    assert await most_at_once(engine) == {"press": 2, customers[0]: 1, customers[1]: 1}
    async with engine.connect() as conn:
        attempts = {r.key: r.attempts for r in await conn.execute(ATTEMPTS_PER_KEY)}
        left = (
            await conn.execute(
                text(f"SELECT key, {KEY_RUNNING} AS running FROM concurrency_keys AS k")
            )
        ).all()
    assert attempts == {"press": 16, customers[0]: 4, customers[1]: 4}  # one attempt each
    assert {r.key: r.running for r in left} == {"press": 0, customers[0]: 0, customers[1]: 0}
