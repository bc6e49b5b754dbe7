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

import asyncio
import importlib.util
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs import Kind
from atlas_jobs._app.db.queries import KEY_RUNNING
from atlas_jobs._app.db.scheduling_settings import KeySetting, set_key
from atlas_jobs._app.fairness import job_key
from atlas_jobs._app.kinds.registry import KindSpec
from atlas_jobs._app.transitions import NewJob, Transitions
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import CLIENT, eventually, state_counts, wait_all_terminal
from tests.workers.procs import Fleet

MODULE = '''
"""Kinds with concurrency limits."""

from pydantic import BaseModel

from atlas_jobs import Concurrency, Context, Rate, Result, kind


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


@kind("demo.paced", input=Work, concurrency=Concurrency(rate=Rate(2, per_seconds=3600)))
async def paced(ctx: Context[Work]) -> Result:
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


def job(kind: str, key: str, limit: int | None, rate: tuple[int, float] | None = None) -> NewJob:
    return NewJob(
        owner="alice",
        kind=kind,
        kind_version=1,
        input={"pause": 0.25},
        max_attempts=3,
        max_elapsed_seconds=3600,
        concurrency_key=key,
        concurrency_limit=limit,
        concurrency_rate=None if rate is None else rate[0],
        concurrency_period_seconds=None if rate is None else rate[1],
    )


def kinds_folder(tmp_path: Path) -> Path:
    """A folder holding the kinds module ``limited`` (``MODULE``)."""
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    (kinds / "limited.py").write_text(textwrap.dedent(MODULE).lstrip())
    return kinds


def limited_fleet(make_fleet: MakeFleet, kinds: Path) -> Fleet:
    """Worker processes that load only the kinds of ``limited``, polling every 0.1 s."""
    fleet = make_fleet(poll_interval_seconds=0.1)
    fleet.extra_env = {
        "PYTHONPATH": str(kinds),
        "ATLAS_KINDS": "limited",
        "ATLAS_BUILTIN_KINDS": "false",
        "ATLAS_KIND_ENTRY_POINTS": "false",
    }
    return fleet


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
    kinds = kinds_folder(tmp_path)
    customers = [job_key("demo.export", c) for c in ("c1", "c2")]
    batch = [job("demo.press", "press", 2) for _ in range(16)] + [
        job("demo.export", key, 1) for key in customers for _ in range(4)
    ]
    async with engine.begin() as conn:
        await transitions.create_many(conn, batch, actor=CLIENT)
    fleet = limited_fleet(make_fleet, kinds)
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


async def test_a_declared_start_rate_holds_until_an_operator_sets_another(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet, tmp_path: Path
) -> None:
    kinds = kinds_folder(tmp_path)
    paced = KindSpec.of(load_kind(kinds, "limited", "demo.paced"), source="test")
    assert (paced.concurrency_key, paced.concurrency_limit) == ("demo.paced", None)
    assert (paced.concurrency_rate, paced.concurrency_period_seconds) == (2, 3600.0)
    batch = [job("demo.paced", "demo.paced", None, (2, 3600.0)) for _ in range(5)]
    async with engine.begin() as conn:
        await transitions.create_many(conn, batch, actor=CLIENT)
    fleet = limited_fleet(make_fleet, kinds)
    worker = fleet.start("w-paced", concurrency=4)
    await eventually(
        lambda: state_counts(engine),
        lambda counts: counts.get("succeeded") == 2,
        timeout=60,
        what="the two starts the declared rate allows",
    )
    await asyncio.sleep(1.5)  # fifteen poll intervals: no token, no start
    assert await state_counts(engine) == {"succeeded": 2, "queued": 3}, fleet.logs()
    async with engine.connect() as conn:
        declared = (await conn.execute(KEY_RATES)).one()
    assert tuple(declared) == (2, 3600.0, 2, 3600.0)

    async with engine.begin() as conn:
        faster = KeySetting(max_running=None, rate=100, period_seconds=1.0)
        await set_key(conn, "demo.paced", faster, actor="operator:ops", note=None)
    assert await wait_all_terminal(engine, timeout=60) == {"succeeded": 5}, fleet.logs()
    assert worker.alive(), fleet.logs()
    async with engine.begin() as conn:
        cleared = KeySetting(max_running=None, rate=None, period_seconds=None)
        await set_key(conn, "demo.paced", cleared, actor="operator:ops", note=None)
        # The operator's rate cleared: the declared one is in force again.
        assert tuple((await conn.execute(KEY_RATES)).one()) == (2, 3600.0, 2, 3600.0)


KEY_RATES = text("""
SELECT declared_rate, declared_period_seconds, rate, period_seconds
  FROM concurrency_keys WHERE key = 'demo.paced'
""")


def load_kind(folder: Path, module: str, name: str) -> Kind[Any]:
    """The declaration ``name`` of the kinds module ``module`` in ``folder``."""
    spec = importlib.util.spec_from_file_location(f"_paced_{module}", folder / f"{module}.py")
    assert spec is not None
    assert spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    found: Kind[Any] = next(
        v for v in vars(loaded).values() if isinstance(v, Kind) and v.name == name
    )
    return found
