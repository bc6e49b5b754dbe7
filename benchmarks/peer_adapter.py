"""Atlas Jobs adapter for the shared peer harness (outside this repository, which runs
PGQueuer, Procrastinate and pgbench on one PostgreSQL; its README says how an adapter is
added, "Adding a system", and run, "Measuring Atlas Jobs beside the peers").

It honours the harness's adapter CLI (``--database-url --jobs --concurrency --mode
drain|enqueue|latency --batch-size --interval-ms --timeout``) and prints ONE JSON line on
stdout; everything else goes to stderr. The three modes mirror the harness's
``peers/_common.py`` (that module cannot be imported here: it needs psycopg, which the
project does not use), with the same timings, so the figures sit beside the peers' in one
table.

Everything measured is the project's real code, nothing skipped:

* the database is dropped, recreated and migrated with the project's alembic
  (``alembic upgrade head``, as ``atlas-jobs migrate``) on every call;
* creation goes through :meth:`atlas_jobs._app.transitions.Transitions.create` (one job, its own
  transaction) and :meth:`~atlas_jobs._app.transitions.Transitions.create_many` (one statement per
  batch, history rows included);
* jobs are ``bench.noop`` v1, a kind declared on the public API (:mod:`benchmarks.bench_kinds`)
  and loaded through ``ATLAS_KINDS`` as a user's kind is, run by the real
  :class:`atlas_jobs._workers.pool.WorkerPool` with the real handler registry (the kind's
  handler notes when it starts). ``ATLAS_BENCH_HANDLER=engine`` runs the same jobs with a
  bare engine handler instead (the input validated by the same model, nothing else): the
  cost of the public API is the difference (``benchmarks/peer-adapter-engine``);
  claims, attempts, fencing, history and publication are the production paths, with
  ``synchronous_commit`` as the server has it (on);
* completion is verified in the database: every job ``succeeded`` with its ``create``,
  ``claim`` and ``publish`` history rows;
* once set up (database, producer connection), the process freezes its start-up heap
  (:func:`atlas_jobs._app.heap.freeze_startup_heap`) as the API and worker processes do before their
  first request or claim.

``--concurrency C`` is the pool's ``concurrency`` (job slots of one worker process).
``ATLAS_WORKER_PREFETCH`` (the production setting, read from the environment as the
service does; unset = C) is how many jobs the pool claims beyond its free slots while
claims come back full; it claims up to ``min(C + prefetch, 100)`` jobs per statement.
The event loop is the worker process's (:mod:`atlas_jobs._workers.eventloop`: uvloop).
Logging is the project's (``configure_logging``) at ``ATLAS_LOG_LEVEL`` (WARNING unless
set: the peers log nothing per job either).

``BENCH_EXPERIMENT_SQL``, when set, runs once on the freshly migrated database before
anything is timed: an A/B of a schema choice without a migration (``DROP INDEX ...``), or
``ALTER DATABASE ... SET log_min_duration_statement = 0`` to sum the server time of each
statement from the server's log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import asyncpg
from alembic import command
from alembic.config import Config
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import (
    AutocommitConnections,
    create_engine,
    libpq_url,
    normalize_url,
    single_statements,
)
from atlas_jobs._app.heap import freeze_startup_heap
from atlas_jobs._app.kinds import KINDS, handler_key
from atlas_jobs._app.kinds.registry import KINDS_VARIABLE
from atlas_jobs._app.kinds.registry import load as load_kinds
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.logs import configure_logging
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from atlas_jobs._workers import eventloop
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.handlers import NO_FILES, Handler, PublishPlan, registry
from atlas_jobs._workers.pool import MAX_CLAIM, WorkerPool
from benchmarks import bench_kinds

REPO = Path(__file__).resolve().parent.parent
KINDS_MODULE = "benchmarks.bench_kinds"
KIND = "bench.noop"
NOOP_KEY = handler_key(KIND, 1)
OWNER = "bench"
PRODUCER = Actor(ActorKind.CLIENT, OWNER)

OnJob = Callable[[Mapping[str, Any]], None]


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (pct in 0..100), as ``_common.percentile``."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(pct / 100.0 * len(ordered)) - 1))
    return ordered[k]


# -- the database ---------------------------------------------------------------------


async def reset_database(url: str) -> None:
    """DROP (FORCE) and CREATE the adapter's own database, through ``postgres``."""
    target = libpq_url(url)
    name = target.rsplit("/", 1)[1].split("?", 1)[0]
    if not name:
        raise SystemExit("--database-url must name a database, e.g. .../bench_atlas")
    admin = await asyncpg.connect(target.rsplit("/", 1)[0] + "/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()


def migrate(url: str) -> None:
    """``alembic upgrade head`` with the project's own configuration."""
    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("script_location", str(REPO / "alembic"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    command.upgrade(config, "head")


@dataclass
class Verification:
    jobs: int
    states: dict[str, int]
    history: dict[str, int]
    complete_histories: int

    def succeeded(self, expected: int) -> bool:
        return (
            self.jobs == expected
            and self.states.get("succeeded", 0) == expected
            and self.complete_histories == expected
        )

    def queued(self, expected: int) -> bool:
        return (
            self.jobs == expected
            and self.states.get("queued", 0) == expected
            and self.history.get("create", 0) == expected
        )

    def as_json(self) -> dict[str, Any]:
        return {"states": self.states, "history": self.history}


VERIFY_COMPLETE = """
SELECT count(*) FROM jobs AS j
 WHERE j.state = 'succeeded'
   AND EXISTS (SELECT 1 FROM job_history h WHERE h.job_id = j.id AND h.transition = 'create')
   AND EXISTS (SELECT 1 FROM job_history h WHERE h.job_id = j.id AND h.transition = 'claim')
   AND EXISTS (SELECT 1 FROM job_history h WHERE h.job_id = j.id AND h.transition = 'publish')
"""


async def verify(url: str) -> Verification:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        states = {r["state"]: r["n"] for r in await conn.fetch(_GROUP.format("state", "jobs"))}
        history = {
            r["transition"]: r["n"]
            for r in await conn.fetch(_GROUP.format("transition", "job_history"))
        }
        complete = int(await conn.fetchval(VERIFY_COMPLETE))
    finally:
        await conn.close()
    return Verification(sum(states.values()), states, history, complete)


_GROUP = "SELECT {0}, count(*) AS n FROM {1} GROUP BY {0}"

PICKUP = """
SELECT EXTRACT(EPOCH FROM (a.claimed_at - j.created_at)) * 1000.0 AS ms
  FROM jobs AS j JOIN attempts AS a ON a.job_id = j.id AND a.number = 1
 WHERE (j.input ->> 'tag') LIKE 'seq-%'
"""


async def pickup_ms(url: str) -> list[float]:
    """Claim time minus creation time of every measured job, from the rows."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return [float(r["ms"]) for r in await conn.fetch(PICKUP)]
    finally:
        await conn.close()


# -- the system -----------------------------------------------------------------------


WARM_UP = "warm-"
"""Tag prefix of the unmeasured warm-up jobs (measured ones are ``seq-<n>``)."""


def _seq(tag: object) -> int:
    """``seq-<n>`` -> n; a warm-up job ``warm-<n>`` -> -1 - n."""
    text = str(tag)
    if text.startswith(WARM_UP):
        return -1 - int(text.removeprefix(WARM_UP))
    return int(text.removeprefix("seq-"))


def load_bench_kind() -> None:
    """Load :mod:`benchmarks.bench_kinds` as a user's kinds are: named in ``ATLAS_KINDS``."""
    named = [m for m in os.environ.get(KINDS_VARIABLE, "").split(",") if m.strip()]
    if KINDS_MODULE not in named:
        os.environ[KINDS_VARIABLE] = ",".join([*named, KINDS_MODULE])
    if KIND not in KINDS:
        KINDS.use(load_kinds())


@dataclass(frozen=True)
class Scheduling:
    """How the created jobs use the scheduler: the plain drain is one owner, the default
    priority and no concurrency key; a keyed drain spreads its jobs over ``owners``
    owners (fair share across their lanes), gives them ``priorities`` different
    priorities (0-9, round robin) and puts every job under one concurrency key of
    ``key_limit`` running at most (``key`` empty: none)."""

    owners: int = 1
    priorities: int = 1
    key: str = ""
    key_limit: int = 1000

    def owner(self, seq: int) -> str:
        return OWNER if self.owners <= 1 else f"{OWNER}-{abs(seq) % self.owners}"

    def priority(self, seq: int) -> int | None:
        """Round robin within each owner (not in step with the owners: every owner's
        lane holds every priority)."""
        if self.priorities <= 1:
            return None
        return (abs(seq) // max(self.owners, 1)) % min(self.priorities, 10)

    def as_json(self) -> dict[str, Any]:
        return {
            "owners": self.owners,
            "priorities": self.priorities,
            "concurrency_key": self.key or None,
            "key_limit": self.key_limit if self.key else None,
        }


class Atlas:
    """Producer (the transition service on its own engine) and worker pools."""

    def __init__(self, url: str, settings: Settings, scheduling: Scheduling | None = None) -> None:
        self.url = url
        self.settings = settings
        self.scheduling = scheduling or Scheduling()
        load_bench_kind()
        self.spec = KINDS[KIND]
        self.transitions = Transitions(Clock(), lease_seconds=settings.lease_seconds)
        # A program creating jobs through the Python API: creation is ONE statement
        # (jobs + history rows), atomic on its own, so it runs without BEGIN/COMMIT and
        # without a pre-ping -- one round trip per call, as PGQueuer's enqueue.
        engine = create_engine(
            url, pool_size=2, application_name="atlas-bench-producer", pre_ping=False
        )
        self.engine: AsyncEngine = single_statements(engine)
        self._connections = AutocommitConnections(engine)
        self._held = AsyncExitStack()
        self._producer: AsyncConnection | None = None
        self.on_job: OnJob = lambda _input: None

    def new_job(self, seq: int) -> NewJob:
        tag = f"seq-{seq}" if seq >= 0 else f"{WARM_UP}{-1 - seq}"
        scheduling = self.scheduling
        return NewJob(
            owner=scheduling.owner(seq),
            kind=self.spec.name,
            kind_version=self.spec.version,
            input={"tag": tag},
            max_attempts=self.spec.max_attempts,
            max_elapsed_seconds=self.spec.max_elapsed_seconds,
            priority=scheduling.priority(seq),
            concurrency_key=scheduling.key or None,
            concurrency_limit=scheduling.key_limit if scheduling.key else None,
        )

    async def producer(self) -> AsyncConnection:
        """The producer's ONE connection, kept across calls as PGQueuer's producer keeps
        its asyncpg connection: a program creating jobs one after another through the
        Python API checks a connection out once, not per job. Autocommit, as the API's
        connections (:class:`~atlas_jobs._app.db.engine.AutocommitConnections`): every statement is
        committed on its own as it runs, with no ``begin()`` around it -- which in
        autocommit sends nothing, yet costs two greenlets per call (~0.05 ms of client
        CPU per create). :func:`run` opens it before the mode starts (the harness's
        ``Peer.open()``)."""
        if self._producer is None:
            self._producer = await self._held.enter_async_context(self._connections.connect())
        return self._producer

    async def enqueue_many(self, seqs: Sequence[int]) -> None:
        """ONE ``create_many`` statement (jobs + history rows), atomic on its own."""
        conn = await self.producer()
        await self.transitions.create_many(conn, [self.new_job(s) for s in seqs], actor=PRODUCER)

    async def enqueue_one(self, seq: int) -> None:
        """``create``: one job, one statement (jobs + history), committed on its own."""
        conn = await self.producer()
        await self.transitions.create(conn, self.new_job(seq), actor=PRODUCER)

    def pool(self, concurrency: int) -> WorkerPool:
        on_job = self.on_job
        if os.environ.get("ATLAS_BENCH_HANDLER") == "engine":
            model = self.spec.input_model

            async def engine_noop(ctx: JobContext) -> PublishPlan:
                on_job(ctx.input)
                model.model_validate(ctx.input)
                return NO_FILES

            handlers: dict[str, Handler] = {NOOP_KEY: engine_noop}
        else:
            bench_kinds.started = on_job
            handlers = {NOOP_KEY: registry()[NOOP_KEY]}
        return WorkerPool(
            self.settings,
            database_url=self.url,
            concurrency=concurrency,
            worker_id=f"bench-{uuid.uuid4().hex[:6]}",
            handlers=handlers,
        )

    async def close(self) -> None:
        await self._held.aclose()
        self._producer = None
        await self.engine.dispose()


# -- modes (as peers/_common.py) ------------------------------------------------------


def _prefetch(concurrency: int) -> int:
    """The pool's prefetch as the service resolves it (``ATLAS_WORKER_PREFETCH``)."""
    configured = Settings().worker_prefetch
    return concurrency if configured is None else configured


def _result(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "system": "atlas",
        "version": package_version("atlas-jobs"),
        "mode": args.mode,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "seconds": None,
        "jobs_per_sec": None,
        "p50_ms": None,
        "p99_ms": None,
        "knobs": {
            "concurrency": args.concurrency,
            "prefetch": _prefetch(args.concurrency),
            "claim_batch": min(args.concurrency + _prefetch(args.concurrency), MAX_CLAIM),
            "worker_processes": 1,
            "log_level": os.environ.get("ATLAS_LOG_LEVEL", "WARNING"),
            "handler": os.environ.get("ATLAS_BENCH_HANDLER") or "kind",
            "scheduling": _scheduling(args).as_json(),
        },
        "event_loop": eventloop.running_loop_name(),
    }
    out.update(extra)
    return out


def _scheduling(args: argparse.Namespace) -> Scheduling:
    return Scheduling(
        owners=args.owners,
        priorities=args.priorities,
        key=args.concurrency_key,
        key_limit=args.key_limit,
    )


async def _enqueue_chunks(atlas: Atlas, seqs: Sequence[int], batch: int) -> None:
    if batch <= 1:
        for seq in seqs:
            await atlas.enqueue_one(seq)
    else:
        for i in range(0, len(seqs), batch):
            await atlas.enqueue_many(seqs[i : i + batch])


async def mode_enqueue(atlas: Atlas, args: argparse.Namespace) -> dict[str, Any]:
    seqs = list(range(args.jobs))
    t0 = time.perf_counter()
    await _enqueue_chunks(atlas, seqs, args.batch_size)
    secs = time.perf_counter() - t0
    found = await verify(atlas.url)
    return _result(
        args,
        concurrency=1,
        knobs={
            "producer": "one connection kept across calls (autocommit), no worker running",
            "startup_heap": "frozen, as the API and worker processes (atlas_jobs._app.heap)",
            "jobs_per_call": args.batch_size,
            "api": "Transitions.create" if args.batch_size <= 1 else "Transitions.create_many",
        },
        batch_size=args.batch_size,
        seconds=round(secs, 4),
        jobs_per_sec=round(args.jobs / secs, 1),
        queued_in_db=found.states.get("queued", 0),
        db=found.as_json(),
        verified=found.queued(args.jobs),
    )


async def mode_drain(atlas: Atlas, args: argparse.Namespace) -> dict[str, Any]:
    seqs = list(range(args.jobs))
    await _enqueue_chunks(atlas, seqs, args.prefill_batch)
    seen: set[int] = set()
    last = [0.0]
    all_seen = asyncio.Event()

    def on_job(job_input: Mapping[str, Any]) -> None:
        seen.add(_seq(job_input["tag"]))
        last[0] = time.perf_counter()
        if len(seen) >= args.jobs:
            all_seen.set()

    atlas.on_job = on_job
    pool = atlas.pool(args.concurrency)
    stop = asyncio.Event()

    async def until_all_succeeded() -> None:
        """Stop the pool once the database records every job succeeded."""
        await all_seen.wait()
        conn = await asyncpg.connect(libpq_url(atlas.url))
        try:
            # The last completions commit moments after their handlers ran; poll for them
            # (nothing in-process signals a commit of another task's group).
            done = 0
            while done < args.jobs:
                await asyncio.sleep(0.01)
                done = await conn.fetchval("SELECT count(*) FROM jobs WHERE state = 'succeeded'")
        finally:
            await conn.close()
        stop.set()

    t0 = time.perf_counter()
    watcher = asyncio.create_task(until_all_succeeded())
    try:
        await asyncio.wait_for(pool.run(stop), timeout=args.timeout)
    finally:
        watcher.cancel()
    t_end = time.perf_counter()
    found = await verify(atlas.url)
    verified = found.succeeded(args.jobs) and len(seen) == args.jobs
    if not verified:
        log(f"[atlas] VERIFY FAILED: {found} seen={len(seen)} expected={args.jobs}")
    secs = t_end - t0
    return _result(
        args,
        seconds=round(secs, 4),
        jobs_per_sec=round(args.jobs / secs, 1),
        last_job_start_s=round(last[0] - t0, 4) if last[0] else None,
        done_in_db=found.states.get("succeeded", 0),
        jobs_seen=len(seen),
        db=found.as_json(),
        verified=verified,
    )


async def mode_latency(atlas: Atlas, args: argparse.Namespace) -> dict[str, Any]:
    starts: dict[int, float] = {}
    enq_at: dict[int, float] = {}
    enq_call_ms: list[float] = []
    all_seen = asyncio.Event()
    warm_seen = asyncio.Event()

    def on_job(job_input: Mapping[str, Any]) -> None:
        seq = _seq(job_input["tag"])
        if seq < 0:  # warm-up job, not measured
            if seq == -args.warmup_jobs:
                warm_seen.set()
            return
        starts[seq] = time.time()
        if len(starts) >= args.jobs:
            all_seen.set()

    atlas.on_job = on_job
    pool = atlas.pool(args.concurrency)
    stop = asyncio.Event()
    running = asyncio.create_task(pool.run(stop))
    try:
        await asyncio.sleep(args.warmup)  # the pool reaches its idle wait
        if args.warmup_jobs > 0:
            for w in range(1, args.warmup_jobs + 1):
                await atlas.enqueue_one(-w)
                await asyncio.sleep(args.interval_ms / 1000.0)
            await asyncio.wait_for(warm_seen.wait(), timeout=args.timeout)
            await asyncio.sleep(args.warmup)  # back to idle
        interval = args.interval_ms / 1000.0
        base = time.perf_counter()
        for i in range(args.jobs):
            delay = base + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.time()
            enq_at[i] = t
            await atlas.enqueue_one(i)
            enq_call_ms.append((time.time() - t) * 1000.0)
        try:
            await asyncio.wait_for(all_seen.wait(), timeout=args.timeout)
        except TimeoutError:
            log(f"[atlas] latency: only {len(starts)}/{args.jobs} jobs started")
    finally:
        stop.set()
        await asyncio.wait_for(running, timeout=30)
    lat = [(starts[i] - enq_at[i]) * 1000.0 for i in starts if i in enq_at]
    pickup = await pickup_ms(atlas.url)
    worst = sorted(((starts[i] - enq_at[i]) * 1000.0, i) for i in starts if i in enq_at)[-5:]
    log("[atlas] latency: 5 worst (ms, seq): " + ", ".join(f"({w:.1f}, {i})" for w, i in worst))

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 2)

    return _result(
        args,
        seconds=round(args.jobs * args.interval_ms / 1000.0, 3),
        p50_ms=rounded(percentile(lat, 50)),
        p99_ms=rounded(percentile(lat, 99)),
        max_ms=rounded(max(lat)) if lat else None,
        pickup_db_p50_ms=rounded(percentile(pickup, 50)),
        pickup_db_p99_ms=rounded(percentile(pickup, 99)),
        pickup_db_max_ms=rounded(max(pickup)) if pickup else None,
        enqueue_call_p50_ms=rounded(percentile(enq_call_ms, 50)),
        interval_ms=args.interval_ms,
        warmup_jobs=args.warmup_jobs,
        jobs_started=len(starts),
        verified=len(starts) == args.jobs and len(pickup) == args.jobs,
        latency_definition=(
            "p50/p99: time.time() at handler start minus time.time() just before the create "
            "call (the harness's definition); pickup_db_*: attempts.claimed_at - "
            "jobs.created_at from the rows"
        ),
    )


# -- entry point ----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--database-url", required=True)
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--mode", choices=["drain", "enqueue", "latency"], required=True)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--prefill-batch", type=int, default=1000)
    p.add_argument("--interval-ms", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--warmup-jobs", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300.0)
    # Not the harness's: how the jobs use the scheduler (benchmarks.suite's keyed drain).
    p.add_argument("--owners", type=int, default=1, help="owners the jobs are spread over")
    p.add_argument("--priorities", type=int, default=1, help="distinct priorities (0-9)")
    p.add_argument("--concurrency-key", default="", help="one concurrency key for every job")
    p.add_argument("--key-limit", type=int, default=1000, help="the key's declared limit")
    return p


async def run(args: argparse.Namespace, url: str, data_dir: Path) -> dict[str, Any]:
    await reset_database(url)
    await asyncio.to_thread(migrate, url)
    if experiment := os.environ.get("BENCH_EXPERIMENT_SQL"):
        conn = await asyncpg.connect(libpq_url(url))
        try:
            await conn.execute(experiment)
        finally:
            await conn.close()
    settings = Settings(DATABASE_URL=url, data_dir=data_dir)
    atlas = Atlas(url, settings, _scheduling(args))
    try:
        # The producer's connection is opened before any mode times anything, as the
        # harness's ``_common.main`` calls ``Peer.open()`` (PGQueuer: its asyncpg
        # connection) before the modes: the timed region holds the calls, not the
        # connection's start-up (~35-90 ms of a ~1 s bulk run: a new backend, the
        # dialect's first-connect queries, the codecs' type introspection).
        await atlas.producer()
        # Set up: from here on the process is a running service, and it treats its heap
        # as the service's processes do before their first request or claim.
        freeze_startup_heap()
        if args.mode == "enqueue":
            return await mode_enqueue(atlas, args)
        if args.mode == "drain":
            return await mode_drain(atlas, args)
        return await mode_latency(atlas, args)
    finally:
        await atlas.close()


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr  # the one JSON line is the only thing on stdout
    os.environ.setdefault("ATLAS_LOG_LEVEL", "WARNING")
    url = normalize_url(args.database_url)
    with tempfile.TemporaryDirectory(prefix="atlas-bench-") as tmp:
        os.environ["DATABASE_URL"] = url
        os.environ["ATLAS_DATA_DIR"] = tmp
        configure_logging(Settings())
        # The worker process's loop (uvloop), for the pool and the producer alike -- as
        # PGQueuer's adapter runs both on uvloop, like its ``pgq`` CLI.
        result = eventloop.run(run(args, url, Path(tmp)))
    print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
