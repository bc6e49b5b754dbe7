"""PostgreSQL CPU per statement of the writes to ``jobs`` -- where the triggers on ``jobs``
show -- with the triggers of two schema revisions, side by side in the same minutes.

Each side (``--before``, ``--after``: alembic revisions, or ``REVISION+FILE.sql`` to try a
variant on top of one) gets a new database migrated to it and one connection in
autocommit, which runs the application's own statements (``atlas_jobs._app.transitions``):

* ``create1``, ``claim1``, ``beat1``, ``publish1``: N one-job creations, claims,
  heartbeats and publications;
* ``create100``, ``claim100``, ``beat100``, ``publish100``: N/10 statements of 100 jobs.

Each workload is warmed up on both sides (not counted), the statistics refreshed, then the
sides take turns, ``CHUNK`` statements each, until both ran N: on a shared, noisy machine
both see the same load. The backend's CPU time comes from ``/proc/<pid>/schedstat``
(nanoseconds on a CPU; a finer clock than ``/proc/<pid>/stat``'s ticks), so the server
must run on this machine (the embedded one does). Two runs of one revision against itself
agree within 1%.

    python -m benchmarks.trigger_cpu --before d0e1f2a3b4c5 --after head --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import create_engine, normalize_url, resolve_database_url
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from benchmarks.peer_adapter import reset_database
from benchmarks.suite import REPO, drop_database, with_database

KIND, VERSION = "noop", 1
HANDLERS = [f"{KIND}@{VERSION}"]
CLIENT = Actor(ActorKind.CLIENT, "bench")
WORKER = Actor(ActorKind.WORKER, "bench")
STAGES = ("create", "claim", "beat", "publish")
CHUNK = 50  # statements run on one side before the other side runs as many


def cpu_ns(pid: int) -> int:
    """Nanoseconds process ``pid`` has spent on a CPU."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def migrate_to(url: str, revision: str) -> None:
    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("script_location", str(REPO / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    command.upgrade(config, "head")
    if revision != "head":
        command.downgrade(config, revision)


class Side:
    """One side's database, connection and jobs in hand."""

    def __init__(self, conn: AsyncConnection, pid: int) -> None:
        self.conn = conn
        self.pid = pid
        self.moves = Transitions(Clock(), lease_seconds=300)
        self.held: list[tuple[uuid.UUID, uuid.UUID]] = []

    def new(self) -> NewJob:
        return NewJob(
            owner="bench",
            kind=KIND,
            kind_version=VERSION,
            input={},
            max_attempts=3,
            max_elapsed_seconds=3600,
        )

    async def create(self, size: int) -> None:
        await self.moves.create_many(self.conn, [self.new() for _ in range(size)], actor=CLIENT)

    async def claim(self, size: int) -> None:
        claimed = await self.moves.claim_to_run(
            self.conn, worker_id="bench", handlers=HANDLERS, limit=size
        )
        self.held.extend((job.job_id, job.attempt_id) for job in claimed)

    async def beat(self, size: int) -> None:
        await self.moves.heartbeat_many(self.conn, self.held[:size])

    async def publish(self, size: int) -> None:
        batch, self.held = self.held[:size], self.held[size:]
        await self.moves.publish_many(
            self.conn,
            batch,
            result_ref={"kind": "inline", "value": {}},
            ttl_seconds=3600,
            actor=WORKER,
            explain_refusals=size == 1,
        )

    def stage(self, name: str, size: int) -> Callable[[], Awaitable[None]]:
        step: Callable[[int], Awaitable[None]] = getattr(self, name)
        return lambda: step(size)

    async def runs(self, step: Callable[[], Awaitable[None]], count: int) -> int:
        """Nanoseconds of backend CPU of ``count`` runs of ``step``."""
        before = cpu_ns(self.pid)
        for _ in range(count):
            await step()
        return cpu_ns(self.pid) - before

    async def analyze(self) -> None:
        """Fresh statistics: a plan made for the empty tables of a new database would
        measure the plan, not the triggers (a claim of 100 nested-loops over every
        queued job)."""
        await self.conn.execute(text("ANALYZE jobs, attempts, owner_backlog"))


@asynccontextmanager
async def side(url: str, spec: str) -> AsyncIterator[Side]:
    """A new database at ``spec``: an alembic revision, or ``REVISION+FILE.sql`` -- that
    revision with the file's SQL run on top (a variant being tried)."""
    revision, _, extra = spec.partition("+")
    await reset_database(url)
    await asyncio.to_thread(migrate_to, url, revision)
    engine = create_engine(url, pool_size=1, pre_ping=False)
    try:
        async with engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            if extra:  # several statements: asyncpg's simple query protocol takes them
                sql = await asyncio.to_thread(Path(extra).read_text)
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None
                await driver.execute(sql)
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            yield Side(conn, pid)
    finally:
        await engine.dispose()
        await drop_database(url)


async def one_round(sides: list[Side], n: int, stages: int) -> list[dict[str, float]]:
    """Each workload on every side, ``CHUNK`` statements at a time in turn; microseconds
    of backend CPU per statement, per side."""
    found: list[dict[str, float]] = [{} for _ in sides]
    for size in (1, 100):
        count = n if size == 1 else max(n // 10, 1)
        warm = max(count // 10, 5)
        for name in STAGES[:stages]:
            steps = [s.stage(name, size) for s in sides]
            if name != "publish":  # the warm-up of publish publishes what is left after
                for s, step in zip(sides, steps, strict=True):
                    await s.runs(step, warm)
            for s in sides:
                await s.analyze()
            spent = [0] * len(sides)
            for start in range(0, count, CHUNK):
                for i, (s, step) in enumerate(zip(sides, steps, strict=True)):
                    spent[i] += await s.runs(step, min(CHUNK, count - start))
            for i, total in enumerate(spent):
                found[i][f"{name}{size}"] = total / count / 1000
            if name == "publish":
                for s, step in zip(sides, steps, strict=True):
                    await s.runs(step, warm)
    return found


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def main(args: argparse.Namespace) -> None:
    base = normalize_url(resolve_database_url(Settings()))
    specs = [args.before, args.after]
    results: list[list[dict[str, float]]] = [[], []]
    stages = STAGES.index(args.upto) + 1
    for number in range(args.rounds):
        async with AsyncExitStack() as stack:
            sides = [
                await stack.enter_async_context(
                    side(with_database(base, f"bench_trigger_cpu_{i}"), spec)
                )
                for i, spec in enumerate(specs)
            ]
            before_load = load()
            found = await one_round(sides, args.n, stages)
        for i, spec in enumerate(specs):
            results[i].append(found[i])
            print(
                f"round {number + 1} load {before_load} -> {load()} {spec}: "
                + " ".join(f"{k}={v:.0f}" for k, v in found[i].items()),
                flush=True,
            )
    print(f"\nmedian us of backend CPU per statement over {args.rounds} rounds")
    print(f"{'workload':>11} {'before':>8} {'after':>8}  ratio   ({specs[0]} -> {specs[1]})")
    for name in results[0][0]:
        before = statistics.median(r[name] for r in results[0])
        after = statistics.median(r[name] for r in results[1])
        print(f"{name:>11} {before:>8.0f} {after:>8.0f}  {after / before:.2f}")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--before", default="d0e1f2a3b4c5", help="alembic revision")
    parser.add_argument("--after", default="head", help="alembic revision")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--upto", choices=STAGES, default=STAGES[-1], help="the last stage run")
    parser.add_argument("-n", type=int, default=2000, help="one-job statements per workload")
    return parser.parse_args(argv)


if __name__ == "__main__":
    os.environ.setdefault("ATLAS_DATA_DIR", str(REPO / ".atlas"))
    asyncio.run(main(parse()))
