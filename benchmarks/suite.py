"""``make bench``: the project's own benchmarks (performance goals), one table and one JSON file.

Seven sections. All but the last run on throwaway databases
(``atlas_bench_<section>_<run>``, dropped at the end) of the embedded PostgreSQL, or of
the server ``DATABASE_URL`` names (its role must be allowed to create databases):

``http``
    A real ``atlas-jobs api`` process (uvicorn, h11, as shipped) and, beside it, the bare
    FastAPI app of :mod:`benchmarks.bare_app` (one INSERT or SELECT per request, same
    uvicorn and engine settings, its own table). The load generator
    (:mod:`benchmarks.loadgen`) runs as a separate process: fixed concurrency, fixed
    request count after a warm-up. Four pairs, each atlas then bare, in one run:
    ``POST /v1/jobs`` without and with a unique ``Idempotency-Key``, ``GET /v1/jobs/{id}``
    answered 200 and 304 (``If-None-Match``). Ratio: atlas req/s / bare req/s.
``kinds``
    What the public kind API costs: the peer benchmark's adapter drains the same no-op
    jobs (``BENCH_KIND_JOBS``) and measures their pickup latency with the job kind declared
    on the public API (``benchmarks/peer-adapter``) and with a bare engine handler
    (``benchmarks/peer-adapter-engine``), alternated ``BENCH_KIND_ROUNDS`` times in the
    same minutes. Ratios: the best drain rate of each, the best pickup p50 of each.
    Beside them, in each round, the *keyed drain*: the same adapter and kind, its
    ``BENCH_KEYED_JOBS`` jobs spread over ``KEYED_OWNERS`` owners (fair share across their
    lanes), with ten priorities, all under one concurrency key whose limit
    (``KEYED_LIMIT``) is high enough never to bind. Ratio: its best drain rate / the
    plain (public kind) drain's best.
``claim``
    ``jobs`` filled with queued ``atlas.noop`` rows (one real ``create_many`` row copied
    by ``INSERT ... SELECT generate_series``, 100,000 rows per statement, with
    time-ordered ids as the product makes them; no history for the filler), then
    ``VACUUM ANALYZE``; then ``Transitions.claim(limit=L)`` timed N times on a
    worker-like engine (``WORKER_SESSION_SETTINGS``, no pre-ping, autocommit:
    as ``WorkerPool`` claims). After each claim as many jobs are created again (untimed)
    so the queue keeps its size. Ratio: p50 at the largest size / p50 at the smallest.
``bloat``
    Jobs churned through the real transition statements in batches of
    ``BENCH_CHURN_BATCH``: ``create_many`` (one statement), ``claim(limit=batch)`` on the
    worker's engine, and the completer's ``publish_many`` over the claimed batch (an
    empty result, the pool's TTL) -- every row the real path writes (jobs, attempts,
    history) is written, only the client is leaner than a pool of job slots (drain
    throughput is the peer harness's measurement, not this one's). Beside it a real
    ``WorkerPool``'s own sweeper runs every second: it expires results after
    ``BENCH_CHURN_RETENTION_SECONDS``, its pruner deletes finished jobs (with their
    history and attempts) the same time later, its vacuumer vacuums a table past
    ``ATLAS_VACUUM_DEAD_ROWS`` dead versions, and its reindexer looks for bloated
    indexes of ``jobs``. So the tables hold the retention window plus what vacuum has
    not reclaimed yet, under a steady churn (creation keeps pace with the drain: no
    backlog builds up, unlike the pool-driven churn before, which enqueued a whole
    stage at once and measured the backlog's peak). Up to each size in turn on one
    database; after each, heap, index and total sizes of ``jobs``, ``job_history`` and
    ``attempts``, each index's size, dead tuples, autovacuum count and the load average.
    Every churned job is accounted for: ``succeeded`` in the table, or pruned (counted by
    the pruner), and nothing else. Ratio: ``jobs`` at the largest size / at the smallest.
``operators``
    Search pages at two table sizes and a bulk resume against the drain rate
    (:mod:`benchmarks.operators`).
``charts``
    The operators' chart queries (last hour, last day) and the two statements of the
    workers' rollup pass at 1,000,000 jobs, each against a primary-key read of one job
    (:mod:`benchmarks.charts`). Goal: a chart query at most 50 ms.
``peers`` (last, outside the time budget)
    The shared peer harness (outside this repository, :mod:`benchmarks.peers`) with
    PGQueuer and Atlas on its own PostgreSQL 15, ``BENCH_PEER_ROUNDS`` times: Atlas over
    PGQueuer in each run for the drain at C=16, bulk and one-by-one enqueue and the
    pickup's p50, their mean against the same ratio before the scheduling work
    (``benchmarks/peer_baseline.json``). Skipped, with the reason printed, when the
    harness is not there.

Knobs (environment variables, defaults in brackets):

- ``BENCH_SECTIONS`` [``http,kinds,claim,bloat,operators,charts,peers``]: which sections run.
- ``BENCH_PEER_HARNESS`` [``../shared/bench``], ``BENCH_PEER_JOBS`` [20000],
  ``BENCH_PEER_SINGLE_JOBS`` [2000], ``BENCH_PEER_ROUNDS`` [2],
  ``BENCH_PEER_WORKDIR`` [``.atlas/peer-harness``]: the peer harness's folder, its drain
  and bulk size, its one-by-one size, how many runs (each ratio is their mean: one run's
  ratios move by a third), and where the working copy it runs from is kept.
- ``BENCH_CHARTS_JOBS`` [1000000], ``BENCH_CHARTS_HISTORY`` [1000000],
  ``BENCH_CHARTS_RECENT`` [60000], ``BENCH_CHARTS_REPEATS`` [200]: the charts section's
  jobs, old history rows, history rows of the last minute, and timed repeats.
- ``BENCH_KIND_JOBS`` [10000], ``BENCH_KIND_LATENCY_JOBS`` [100], ``BENCH_KIND_ROUNDS``
  [2]: the kinds section's drain size, latency jobs and rounds.
- ``BENCH_KEYED_JOBS`` [``BENCH_KIND_JOBS``]: the keyed drain's size (one per round; the
  ratio compares drain rates, fairest at the plain drain's size).
- ``BENCH_HTTP_REQUESTS`` [3000], ``BENCH_HTTP_WARMUP`` [300],
  ``BENCH_HTTP_CONCURRENCY`` [16]: per measured endpoint.
- ``BENCH_CLAIM_SIZES`` [``1000,1000000``], ``BENCH_CLAIMS`` [200],
  ``BENCH_CLAIM_LIMIT`` [16], ``BENCH_CLAIM_OWNERS`` [1000]: the sizes above the smallest
  are spread over this many owners (lanes), the smallest is one owner's FIFO queue.
- ``BENCH_FAIR_SAMPLES`` [200], ``BENCH_FAIR_BACKLOG`` [100000]: the claim section's fair
  pickup (:mod:`benchmarks.fair_pickup`): one owner's job picked up behind another
  owner's backlog of this size, against an empty queue, this many times each.
- ``BENCH_CHURN_SIZES`` [``100000,1000000``], ``BENCH_CHURN_BATCH`` [1000] (jobs per
  create, claim and publication statement), ``BENCH_CHURN_RETENTION_SECONDS`` [5]: the
  result TTL and the finished-job retention beyond it during the churn.
- ``BENCH_BUDGET_SECONDS`` [540]: seconds from the suite's start by which its last stage
  must end (the rest of the 10 minutes is for measuring, dropping the databases and the
  report). The smallest claim and churn sizes are the baselines and always run; before
  each larger one the time it needs is estimated (the fill rate measured so far, the
  churn rate of the stage before) and the size is cut to what fits -- or
  skipped when nothing beyond the baseline fits -- and a stage also stops at the
  deadline itself, at a chunk's or batch's end. The JSON and the table then name the
  size reached and the one asked.
- ``BENCH_SEARCH_SMALL`` [10000], ``BENCH_SEARCH_LARGE`` [1000000], ``BENCH_SEARCH_READS``
  [50], ``BENCH_BULK_JOBS`` [10000]: the operators section (:mod:`benchmarks.operators`).
- ``BENCH_RESULTS_DIR`` [``benchmarks/results``]; ``BENCH_KEEP_DATABASES`` [unset]: set to
  1 to keep the databases for inspection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import platform
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.engine import (
    WORKER_SESSION_SETTINGS,
    create_engine,
    libpq_url,
    normalize_url,
    resolve_database_url,
    single_statements,
)
from atlas_jobs._app.db.queries import CLAIM
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, Applied, Transitions
from atlas_jobs._workers.handlers import registry
from benchmarks import charts, operators, peers
from benchmarks.loadgen import percentile
from benchmarks.peer_adapter import Atlas, migrate, reset_database

REPO = Path(__file__).resolve().parent.parent
HOT_TABLES = ("jobs", "job_history", "attempts")
NOOP_BODY = {"kind": "atlas.noop", "input": {"tag": "bench"}}


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


# -- knobs ----------------------------------------------------------------------------


def _int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _ints(name: str, default: str) -> list[int]:
    raw = os.environ.get(name, default)
    return sorted({int(part.replace("_", "")) for part in raw.split(",") if part.strip()})


SECTIONS = ("http", "kinds", "claim", "bloat", "operators", "charts", "peers")


@dataclass(frozen=True)
class Knobs:
    sections: tuple[str, ...]
    http_requests: int
    http_warmup: int
    http_concurrency: int
    claim_sizes: list[int]
    claims: int
    claim_limit: int
    claim_owners: int
    churn_sizes: list[int]
    churn_batch: int
    churn_retention_seconds: int
    results_dir: Path
    keep_databases: bool
    budget_seconds: int
    kind_jobs: int
    kind_latency_jobs: int
    kind_rounds: int
    keyed_jobs: int = 10000
    fair_samples: int = 200
    fair_backlog: int = 100_000
    charts_jobs: int = 1_000_000
    charts_history: int = 1_000_000
    charts_recent: int = 60_000
    charts_repeats: int = 200
    peer_jobs: int = 20_000
    peer_single_jobs: int = 2_000
    peer_rounds: int = 2

    @classmethod
    def from_environment(cls) -> Knobs:
        sections = tuple(
            s.strip() for s in os.environ.get("BENCH_SECTIONS", ",".join(SECTIONS)).split(",")
        )
        unknown = set(sections) - set(SECTIONS)
        if unknown:
            raise SystemExit(f"BENCH_SECTIONS: unknown section(s) {sorted(unknown)}")
        return cls(
            sections=sections,
            http_requests=_int("BENCH_HTTP_REQUESTS", 3000),
            http_warmup=_int("BENCH_HTTP_WARMUP", 300),
            http_concurrency=_int("BENCH_HTTP_CONCURRENCY", 16),
            claim_sizes=_ints("BENCH_CLAIM_SIZES", "1000,1000000"),
            claims=_int("BENCH_CLAIMS", 200),
            claim_limit=_int("BENCH_CLAIM_LIMIT", 16),
            claim_owners=_int("BENCH_CLAIM_OWNERS", 1000),
            churn_sizes=_ints("BENCH_CHURN_SIZES", "100000,1000000"),
            churn_batch=_int("BENCH_CHURN_BATCH", 1000),
            churn_retention_seconds=_int("BENCH_CHURN_RETENTION_SECONDS", 5),
            results_dir=Path(os.environ.get("BENCH_RESULTS_DIR", REPO / "benchmarks" / "results")),
            keep_databases=os.environ.get("BENCH_KEEP_DATABASES", "") not in ("", "0"),
            budget_seconds=_int("BENCH_BUDGET_SECONDS", 540),
            kind_jobs=_int("BENCH_KIND_JOBS", 10000),
            kind_latency_jobs=_int("BENCH_KIND_LATENCY_JOBS", 100),
            kind_rounds=_int("BENCH_KIND_ROUNDS", 2),
            keyed_jobs=_int("BENCH_KEYED_JOBS", _int("BENCH_KIND_JOBS", 10000)),
            fair_samples=_int("BENCH_FAIR_SAMPLES", 200),
            fair_backlog=_int("BENCH_FAIR_BACKLOG", 100_000),
            charts_jobs=_int("BENCH_CHARTS_JOBS", 1_000_000),
            charts_history=_int("BENCH_CHARTS_HISTORY", 1_000_000),
            charts_recent=_int("BENCH_CHARTS_RECENT", 60_000),
            charts_repeats=_int("BENCH_CHARTS_REPEATS", 200),
            peer_jobs=_int("BENCH_PEER_JOBS", 20_000),
            peer_single_jobs=_int("BENCH_PEER_SINGLE_JOBS", 2_000),
            peer_rounds=_int("BENCH_PEER_ROUNDS", 2),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "sections": list(self.sections),
            "http_requests": self.http_requests,
            "http_warmup": self.http_warmup,
            "http_concurrency": self.http_concurrency,
            "claim_sizes": self.claim_sizes,
            "claims": self.claims,
            "claim_limit": self.claim_limit,
            "claim_owners": self.claim_owners,
            "churn_sizes": self.churn_sizes,
            "churn_batch": self.churn_batch,
            "churn_retention_seconds": self.churn_retention_seconds,
            "budget_seconds": self.budget_seconds,
            "kind_jobs": self.kind_jobs,
            "kind_latency_jobs": self.kind_latency_jobs,
            "kind_rounds": self.kind_rounds,
            "keyed_jobs": self.keyed_jobs,
            "charts_jobs": self.charts_jobs,
            "charts_history": self.charts_history,
            "charts_recent": self.charts_recent,
            "charts_repeats": self.charts_repeats,
            "peer_jobs": self.peer_jobs,
            "peer_single_jobs": self.peer_single_jobs,
            "peer_rounds": self.peer_rounds,
        }


# -- the time budget -------------------------------------------------------------------

SECTION_TAIL_SECONDS = 10.0
"""Kept free after a section's last stage: its measurement and dropping its database."""
CLAIM_TAIL_SECONDS = 20.0
"""After the claim section's fill: VACUUM ANALYZE of the filled table, the timed claims
and the EXPLAIN."""


@dataclass
class Budget:
    """The suite's deadline and the rates each stage's estimate starts from: assumed
    until measured, then the last measured one."""

    deadline: float
    """``time.perf_counter()`` by which the last stage must have ended."""
    churn_jobs_per_second: float = 2000.0
    fill_seconds_per_row: float = 60e-6

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def fits(self, seconds: float) -> bool:
        return seconds <= self.left()


# -- databases ------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    return make_url(url).set(database=name).render_as_string(hide_password=False)


@asynccontextmanager
async def scratch_database(base_url: str, name: str, keep: bool) -> AsyncIterator[str]:
    """A freshly created and migrated database, dropped afterwards (unless kept)."""
    url = with_database(base_url, name)
    await reset_database(url)
    await asyncio.to_thread(migrate, url)
    try:
        yield url
    finally:
        if not keep:
            await drop_database(url)


async def drop_database(url: str) -> None:
    target = libpq_url(url)
    name = target.rsplit("/", 1)[1].split("?", 1)[0]
    admin = await asyncpg.connect(target.rsplit("/", 1)[0] + "/postgres")
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def server_version(url: str) -> str:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


# -- http -----------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def bench_key(url: str) -> str:
    """A new API key of the owner ``bench`` (role client) in the database at ``url``."""
    engine = create_engine(url, pool_size=1, application_name="atlas-bench")
    try:
        async with engine.begin() as conn:
            return await create_key(conn, owner="bench", roles=[Role.CLIENT])
    finally:
        await engine.dispose()


def api_environment(url: str, data_dir: str) -> dict[str, str]:
    """The environment of an API process under the load generator: this database, a
    throwaway data dir, quiet logs, the owner's admission cap out of the way."""
    return {
        **os.environ,
        "DATABASE_URL": url,
        "ATLAS_DATA_DIR": data_dir,
        "ATLAS_SIGNING_SECRET": secrets.token_hex(32),
        "ATLAS_LOG_LEVEL": "WARNING",
        "ATLAS_ADMISSION_MAX_ACTIVE_PER_OWNER": str(10**9),
    }


@contextmanager
def server_process(
    args: list[str], *, env: dict[str, str], log_path: Path, port: int, cwd: Path = REPO
) -> Iterator[subprocess.Popen[bytes]]:
    """``python ARGS`` (in ``cwd``) in its own session until ``/readyz`` answers; SIGTERM
    at exit."""
    with log_path.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603 - our own entry points
            [sys.executable, *args],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{args} exited early:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args} never became ready:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def load(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the load generator as its own process; its one JSON line is the result."""
    done = subprocess.run(  # noqa: S603 - our own entry point
        [sys.executable, "-m", "benchmarks.loadgen", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["unexpected"]:
        raise RuntimeError(f"unexpected answers {result['statuses']} for {spec['paths'][0]}")
    return result


async def section_http(base_url: str, knobs: Knobs, run_id: str) -> dict[str, Any]:
    async with scratch_database(
        base_url, f"atlas_bench_http_{run_id}", knobs.keep_databases
    ) as url:
        key = await bench_key(url)
        with tempfile.TemporaryDirectory(prefix="atlas-bench-http-") as tmp:
            env = {**api_environment(url, tmp), "PYTHONPATH": str(REPO)}
            atlas_port, bare_port = free_port(), free_port()
            with (
                server_process(
                    ["-m", "atlas_jobs._app.cli", "api", "--port", str(atlas_port)],
                    env=env,
                    log_path=Path(tmp) / "atlas-api.log",
                    port=atlas_port,
                ),
                server_process(
                    ["-m", "benchmarks.bare_app", "--port", str(bare_port)],
                    env=env,
                    log_path=Path(tmp) / "bare-api.log",
                    port=bare_port,
                ),
            ):
                return await asyncio.to_thread(
                    measure_http, knobs, key, atlas_port, bare_port, run_id
                )


def measure_http(
    knobs: Knobs, key: str, atlas_port: int, bare_port: int, run_id: str
) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {key}"}
    atlas_base, bare_base = f"http://127.0.0.1:{atlas_port}", f"http://127.0.0.1:{bare_port}"
    created = httpx.post(f"{atlas_base}/v1/jobs", json=NOOP_BODY, headers=auth, timeout=10)
    created.raise_for_status()
    bare_created = httpx.post(f"{bare_base}/bare/jobs", json=NOOP_BODY, timeout=10)
    bare_created.raise_for_status()
    atlas_path = f"/v1/jobs/{created.json()['id']}"
    bare_path = f"/bare/jobs/{bare_created.json()['id']}"
    atlas_etag, bare_etag = created.headers["ETag"], bare_created.headers["ETag"]
    common = {
        "requests": knobs.http_requests,
        "warmup": knobs.http_warmup,
        "concurrency": knobs.http_concurrency,
    }
    pairs: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
        (
            "create",
            "POST /v1/jobs",
            {"method": "POST", "paths": ["/v1/jobs"], "body": NOOP_BODY, "expect": 202},
            {"method": "POST", "paths": ["/bare/jobs"], "body": NOOP_BODY, "expect": 202},
        ),
        (
            "create_idempotent",
            "POST /v1/jobs + Idempotency-Key",
            {
                "method": "POST",
                "paths": ["/v1/jobs"],
                "body": NOOP_BODY,
                "idempotency_keys": f"bench-{run_id}",
                "expect": 202,
            },
            {
                "method": "POST",
                "paths": ["/bare/jobs"],
                "body": NOOP_BODY,
                "idempotency_keys": f"bench-{run_id}",
                "expect": 202,
            },
        ),
        (
            "status_200",
            "GET /v1/jobs/{id} 200",
            {"method": "GET", "paths": [atlas_path], "expect": 200},
            {"method": "GET", "paths": [bare_path], "expect": 200},
        ),
        (
            "status_304",
            "GET /v1/jobs/{id} 304",
            {
                "method": "GET",
                "paths": [atlas_path],
                "headers": {"If-None-Match": atlas_etag},
                "expect": 304,
            },
            {
                "method": "GET",
                "paths": [bare_path],
                "headers": {"If-None-Match": bare_etag},
                "expect": 304,
            },
        ),
    ]
    results: dict[str, Any] = {}
    for name, label, atlas_spec, bare_spec in pairs:
        atlas_spec = {
            **common,
            **atlas_spec,
            "port": atlas_port,
            "headers": {**auth, **atlas_spec.get("headers", {})},
        }
        bare_spec = {**common, **bare_spec, "port": bare_port}
        log(f"[bench] http {name}: atlas ...")
        atlas = load(atlas_spec)
        log(f"[bench] http {name}: bare ...")
        bare = load(bare_spec)
        results[name] = {
            "label": label,
            "atlas": atlas,
            "bare": bare,
            "ratio": round(atlas["rps"] / bare["rps"], 3),
        }
        log(f"[bench] http {name}: atlas {atlas['rps']} req/s, bare {bare['rps']} req/s")
    return results


# -- claim ----------------------------------------------------------------------------


# The filler's ids are time-ordered like the product's (atlas_jobs._app.ids.new_id, UUIDv7): the
# column's default (gen_random_uuid) would scatter them over pk_jobs as no real queue does.
FILL = text("""
INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, delivery_state)
SELECT atlas_uuid_v7(),
       CASE WHEN CAST(:owners AS integer) > 1 THEN t.owner || '-' || (g % :owners) ELSE t.owner END,
       t.kind, t.kind_version,
       jsonb_build_object('tag', 'fill-' || g), t.state, t.reason, t.max_attempts,
       t.max_elapsed_seconds, t.delivery_state
  FROM (SELECT * FROM jobs ORDER BY seq LIMIT 1) AS t, generate_series(1, :n) AS g
""")


FILL_CHUNK = 100_000
"""Rows per filling statement: the budget is checked between them."""


async def fill_queue(
    conn: AsyncConnection, size: int, budget: Budget | None, reserve: float, owners: int = 1
) -> tuple[int, float]:
    """Copy the one real row until ``size`` rows are queued, a chunk at a time; with a
    ``budget``, stop early when the next chunk, at the rate measured so far, would end
    less than ``reserve`` seconds before the suite's deadline. Rows queued, seconds."""
    t0 = time.perf_counter()
    queued = 1
    while queued < size:
        n = min(FILL_CHUNK, size - queued)
        if budget is not None:
            elapsed = time.perf_counter() - t0
            per_row = elapsed / (queued - 1) if queued > 1 else budget.fill_seconds_per_row
            if not budget.fits(n * per_row + reserve):
                break
        await conn.execute(FILL, {"n": n, "owners": owners})
        queued += n
    return queued, time.perf_counter() - t0


async def claim_at_size(
    base_url: str, knobs: Knobs, run_id: str, size: int, budget: Budget | None, reserve: float
) -> dict[str, Any] | None:
    """The claim timed at ``size`` queued jobs. With a ``budget`` the fill is cut to what
    fits; ``None`` when that is no more than the smallest size (nothing to compare)."""
    async with scratch_database(
        base_url, f"atlas_bench_claim_{run_id}", knobs.keep_databases
    ) as url:
        settings = Settings(DATABASE_URL=url)
        producer = Atlas(url, settings)
        try:
            t0 = time.perf_counter()
            await producer.enqueue_many([0])  # one real row: the filler copies it
            async with producer.engine.connect() as conn:
                # The baseline (smallest size) is one owner's FIFO queue; the larger ones
                # are spread over BENCH_CLAIM_OWNERS owners: the fair claim's worst case.
                owners = 1 if size == knobs.claim_sizes[0] else knobs.claim_owners
                queued_now, _ = await fill_queue(conn, size, budget, reserve, owners)
            if queued_now <= knobs.claim_sizes[0] < size:
                log(f"[bench] claim at {size:,} queued skipped: over the time budget")
                return None
            if queued_now < size:
                log(f"[bench] claim at {size:,} queued cut to {queued_now:,}: time budget")
            raw = await asyncpg.connect(libpq_url(url))
            try:
                await raw.execute("VACUUM ANALYZE")
            finally:
                await raw.close()
            fill_seconds = time.perf_counter() - t0
            log(f"[bench] claim: {queued_now:,} queued in {fill_seconds:.1f} s")
            # As WorkerPool claims: its session settings, no pre-ping, one statement.
            base = create_engine(
                url,
                pool_size=1,
                application_name="atlas-bench-claim",
                server_settings=WORKER_SESSION_SETTINGS,
                pre_ping=False,
            )
            engine = single_statements(base)
            transitions = Transitions(Clock(), lease_seconds=settings.lease_seconds)
            handlers = sorted(registry())
            timings: list[float] = []
            seq = 1
            try:
                warmup = max(1, min(20, knobs.claims // 10))
                for n in range(warmup + knobs.claims):
                    async with engine.connect() as conn:
                        t = time.perf_counter()
                        rows = await transitions.claim_to_run(
                            conn, worker_id="bench", handlers=handlers, limit=knobs.claim_limit
                        )
                        elapsed = (time.perf_counter() - t) * 1000.0
                    if len(rows) != knobs.claim_limit:
                        raise RuntimeError(f"claimed {len(rows)}, not {knobs.claim_limit}")
                    if n >= warmup:
                        timings.append(elapsed)
                    # Top up (untimed): the queue keeps its size.
                    await producer.enqueue_many(list(range(seq, seq + len(rows))))
                    seq += len(rows)
                async with engine.connect() as conn:
                    queued = (
                        await conn.execute(text("SELECT count(*) FROM jobs WHERE state = 'queued'"))
                    ).scalar_one()
                plan = await explain_claim(base, transitions, handlers, knobs.claim_limit)
            finally:
                await engine.dispose()
        finally:
            await producer.close()
    mean = sum(timings) / len(timings)
    return {
        "queued": queued_now,
        "owners": owners,
        "requested": size,
        "queued_after": int(queued),
        "claims": len(timings),
        "limit": knobs.claim_limit,
        "fill_seconds": round(fill_seconds, 2),
        "p50_ms": round(percentile(timings, 50) or 0.0, 3),
        "p99_ms": round(percentile(timings, 99) or 0.0, 3),
        "mean_ms": round(mean, 3),
        "explain": plan,
    }


EXPLAIN_CLAIM = text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + CLAIM.text)


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


async def explain_claim(
    engine: AsyncEngine, transitions: Transitions, handlers: list[str], limit: int
) -> dict[str, Any]:
    """One more claim under ``EXPLAIN (ANALYZE, BUFFERS)``, rolled back: where its time
    and its buffers go at this queue size."""
    params = {
        "worker_id": "bench",
        "actor": str(Actor(ActorKind.WORKER, "bench")),
        "handlers": handlers,
        "limit": limit,
        "lease_seconds": transitions.lease_seconds,
        **transitions.clock.bind(),
    }
    async with engine.connect() as conn:  # a transaction, rolled back at close
        raw = (await conn.execute(EXPLAIN_CLAIM, params)).scalar_one()
    found = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    top = found["Plan"]
    picked = [
        {
            "node": n["Node Type"],
            "index": n.get("Index Name"),
            "rows": n.get("Actual Rows"),
            "shared_hit": n.get("Shared Hit Blocks"),
            "shared_read": n.get("Shared Read Blocks"),
        }
        for n in _plan_nodes(top)
        if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]
    ]
    return {
        "planning_ms": found.get("Planning Time"),
        "execution_ms": found.get("Execution Time"),
        "shared_hit": top.get("Shared Hit Blocks"),
        "shared_read": top.get("Shared Read Blocks"),
        "jobs_scans": picked,
        "triggers_ms": round(sum(t.get("Time", 0.0) for t in found.get("Triggers", [])), 3),
    }


async def section_claim(base_url: str, knobs: Knobs, run_id: str, budget: Budget) -> dict[str, Any]:
    # What the claim section leaves for the churn: its smallest stage at the assumed
    # rate, so the claim at 1,000,000 never eats the churn's first stage.
    reserve = CLAIM_TAIL_SECONDS + (
        knobs.churn_sizes[0] / budget.churn_jobs_per_second + SECTION_TAIL_SECONDS
        if "bloat" in knobs.sections
        else 0.0
    )
    sizes: list[dict[str, Any]] = []
    for n, size in enumerate(knobs.claim_sizes):
        # The smallest size is the baseline: always measured in full.
        found = await claim_at_size(base_url, knobs, run_id, size, budget if n else None, reserve)
        if found is not None:
            sizes.append(found)
    for found in sizes:
        log(f"[bench] claim at {found['queued']:,} queued: p50 {found['p50_ms']} ms")
    from benchmarks import fair_pickup  # it imports this module: not at the top

    fair = await fair_pickup.measure(
        base_url, samples=knobs.fair_samples, limit=knobs.claim_limit, backlog=knobs.fair_backlog
    )
    log(f"[bench] fair pickup p99: {fair['behind']['p99_ms']} ms behind the backlog")
    return {
        "fair_pickup": fair,
        "sizes": sizes,
        "ratio": round(sizes[-1]["p50_ms"] / sizes[0]["p50_ms"], 3),
        "cut_by_budget": len(sizes) < len(knobs.claim_sizes)
        or any(s["queued"] != s["requested"] for s in sizes),
        "requested_sizes": knobs.claim_sizes,
    }


# -- bloat ----------------------------------------------------------------------------


SIZES = text("""
SELECT c.relname AS name,
       pg_relation_size(c.oid) AS heap,
       pg_indexes_size(c.oid) AS indexes,
       pg_total_relation_size(c.oid) AS total,
       s.n_live_tup AS live, s.n_dead_tup AS dead,
       s.autovacuum_count AS autovacuums
  FROM pg_class AS c JOIN pg_stat_user_tables AS s ON s.relid = c.oid
 WHERE c.relname = ANY(:names)
""")
INDEX_SIZES = text("""
SELECT t.relname AS table_name, x.relname AS index_name, pg_relation_size(x.oid) AS bytes
  FROM pg_index AS i
  JOIN pg_class AS t ON t.oid = i.indrelid
  JOIN pg_class AS x ON x.oid = i.indexrelid
 WHERE t.relname = ANY(:names)
""")
STATE_COUNTS = text("SELECT state, count(*) FROM jobs GROUP BY state")


@dataclass
class Churned:
    seconds: float
    jobs: int
    """Jobs created (and run) in this stage; fewer than asked when the deadline cut it."""
    pruned: int
    """Jobs the pruner deleted during this stage."""
    tables: dict[str, dict[str, Any]]
    """The tables' sizes when the last batch was published (the sweeper still running:
    its last pass, which may prune for seconds more, is not waited for first)."""


class Churner:
    """The real path's statements in large batches: ``create_many`` (1,000 per
    statement), ``claim(limit=1000)`` on an engine set up as ``WorkerPool``'s, and the
    completer's ``publish_many`` over the claimed batch (empty result, the pool's TTL);
    beside them a real ``WorkerPool``'s own sweeper (expiry, pruning, maintenance) every
    ``sweeper_interval_seconds``. Every row the real path writes is written -- jobs,
    attempts, history -- only the client is leaner than 64 job slots on the same cores.
    """

    def __init__(self, atlas: Atlas, batch: int) -> None:
        self.atlas = atlas
        self.batch = batch
        self.pool = atlas.pool(1)  # never run: its engine, transitions and sweeper
        self.handlers = sorted(self.pool.handlers)

    async def run(self, start: int, stop_at: int, deadline: float) -> Churned:
        """Churn jobs ``start..stop_at`` (each created, claimed and published); stop
        early, at a batch boundary, once ``deadline`` (``time.perf_counter()``) passed."""
        pool = self.pool
        stop = asyncio.Event()
        pruned_before = pool.maintenance.pruner.total
        sweeping = asyncio.create_task(self._sweep(stop))
        t0 = time.perf_counter()
        done = start
        tables: dict[str, dict[str, Any]] = {}
        try:
            # Pipelined: the next batch is created while this one is published (two
            # statements on two connections, no row in common), as a producer and a
            # worker would overlap.
            created = done
            while done < stop_at and (created > done or time.perf_counter() < deadline):
                n = min(self.batch, stop_at - done)
                if created == done:
                    await self.atlas.enqueue_many(list(range(done, done + n)))
                    created += n
                async with pool.statements.connect() as conn:  # as the claim loop
                    rows = await pool.transitions.claim_to_run(
                        conn, worker_id=pool.worker_id, handlers=self.handlers, limit=n
                    )
                following = min(self.batch, stop_at - created)
                more = following > 0 and time.perf_counter() < deadline
                results, _ = await asyncio.gather(
                    self._publish(rows),
                    self.atlas.enqueue_many(list(range(created, created + following)))
                    if more
                    else asyncio.sleep(0),
                )
                if more:
                    created += following
                published = sum(isinstance(r, Applied) for r in results)
                if len(rows) != n or published != n:
                    raise RuntimeError(f"claimed {len(rows)} and published {published} of {n}")
                done += n
            seconds = time.perf_counter() - t0
            async with self.atlas.engine.connect() as conn:
                tables = await measure_tables(conn)
        finally:
            stop.set()
            await sweeping
        return Churned(seconds, done - start, pool.maintenance.pruner.total - pruned_before, tables)

    async def _publish(self, rows: Sequence[Any]) -> list[Any]:
        """As the completer publishes a flush: one ``publish_many`` statement."""
        pool = self.pool
        async with pool.statements.begin() as conn:
            return await pool.transitions.publish_many(
                conn,
                [(job.job_id, job.attempt_id) for job in rows],
                result_ref={"files": []},
                ttl_seconds=pool.settings.result_ttl_seconds,
                actor=pool.actor,
                explain_refusals=False,
            )

    async def _sweep(self, stop: asyncio.Event) -> None:
        interval = self.pool.settings.sweeper_interval_seconds
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
            await self.pool.maintenance.sweeper.run_once()

    async def close(self) -> None:
        await self.pool.engine.dispose()
        await self.pool.heartbeat_engine.dispose()


async def measure_tables(conn: AsyncConnection) -> dict[str, dict[str, Any]]:
    rows = (await conn.execute(SIZES, {"names": list(HOT_TABLES)})).all()
    indexes: dict[str, dict[str, int]] = {name: {} for name in HOT_TABLES}
    for row in (await conn.execute(INDEX_SIZES, {"names": list(HOT_TABLES)})).all():
        indexes[row.table_name][row.index_name] = int(row.bytes)
    return {
        row.name: {
            "heap_bytes": int(row.heap),
            "index_bytes": int(row.indexes),
            "total_bytes": int(row.total),
            "live_tuples": int(row.live),
            "dead_tuples": int(row.dead),
            "autovacuums": int(row.autovacuums),
            "indexes": indexes[row.name],
        }
        for row in rows
    }


async def section_bloat(base_url: str, knobs: Knobs, run_id: str, budget: Budget) -> dict[str, Any]:
    stages: list[dict[str, Any]] = []
    async with scratch_database(
        base_url, f"atlas_bench_bloat_{run_id}", knobs.keep_databases
    ) as url:
        with tempfile.TemporaryDirectory(prefix="atlas-bench-bloat-") as tmp:
            retention = float(knobs.churn_retention_seconds)
            settings = Settings(
                DATABASE_URL=url,
                data_dir=Path(tmp),
                result_ttl_seconds=retention,
                finished_job_retention_seconds=retention,
                sweeper_interval_seconds=1.0,
            )
            atlas = Atlas(url, settings)
            churner = Churner(atlas, knobs.churn_batch)
            try:
                done = pruned = 0
                for requested in knobs.churn_sizes:
                    # The largest size (a twentieth's multiple) that fits the time left
                    # at the rate expected; the stage also stops at the deadline itself.
                    # The first size is the baseline: always churned in full.
                    stop_by = budget.deadline - SECTION_TAIL_SECONDS if stages else math.inf
                    left = stop_by - time.perf_counter()
                    reach = done + int(min(budget.churn_jobs_per_second * left, 10**12))
                    step = max(knobs.churn_batch, requested // 20)
                    size = requested if reach >= requested else reach // step * step
                    if size <= done:
                        log(f"[bench] churn to {requested:,} skipped: over the time budget")
                        continue
                    if size < requested:
                        log(f"[bench] churn to {requested:,} cut to {size:,}: time budget")
                    ran = await churner.run(done, size, stop_by)
                    pruned += ran.pruned
                    size = done + ran.jobs
                    # The next stage is cut to this rate; should it run slower (pruning
                    # starts only after the retention in the first), its own deadline
                    # stops it. A pessimistic factor left 85 s of the budget unused.
                    budget.churn_jobs_per_second = ran.jobs / ran.seconds
                    async with atlas.engine.connect() as conn:
                        states: dict[str, int] = {
                            str(state): int(n)
                            for state, n in (await conn.execute(STATE_COUNTS)).all()
                        }
                    tables = ran.tables
                    succeeded = states.pop("succeeded", 0)
                    if states or succeeded + pruned != size:
                        raise RuntimeError(
                            f"churn to {size}: {succeeded} succeeded + {pruned} pruned, "
                            f"other states {states}"
                        )
                    stage: dict[str, Any] = {
                        "churned": size,
                        "requested": requested,
                        "seconds": round(ran.seconds, 2),
                        "jobs_per_sec": round(ran.jobs / ran.seconds, 1),
                        "pruned": pruned,
                        "jobs_rows": succeeded,
                        "tables": tables,
                        "hot_total_bytes": sum(t["total_bytes"] for t in tables.values()),
                        "load_average": [round(x, 2) for x in os.getloadavg()],
                    }
                    stages.append(stage)
                    log(
                        f"[bench] churned {size:,} ({stage['jobs_per_sec']} jobs/s, "
                        f"{pruned:,} pruned, {succeeded:,} rows left): jobs "
                        f"{mib(tables['jobs']['total_bytes'])}, all three "
                        f"{mib(stage['hot_total_bytes'])}, load {stage['load_average']}"
                    )
                    done = size
            finally:
                await churner.close()
                await atlas.close()
    first, last = stages[0], stages[-1]
    return {
        "stages": stages,
        "ratio": round(
            last["tables"]["jobs"]["total_bytes"] / first["tables"]["jobs"]["total_bytes"], 3
        ),
        "ratio_all": round(last["hot_total_bytes"] / first["hot_total_bytes"], 3),
        "cut_by_budget": len(stages) < len(knobs.churn_sizes)
        or any(s["churned"] != s["requested"] for s in stages),
    }


# -- report ---------------------------------------------------------------------------


# -- the public kind API's cost --------------------------------------------------------

ADAPTERS = {
    "kind": REPO / "benchmarks" / "peer-adapter",
    "engine": REPO / "benchmarks" / "peer-adapter-engine",
}
"""The peer benchmark's adapter with the job kind declared on the public API (``kind``)
and with a bare engine handler (``engine``): the same jobs, claims and publications."""


def adapter_call(url: str, handler: str, *args: str) -> dict[str, Any]:
    """One call of the peer adapter (its own database, dropped and migrated)."""
    done = subprocess.run(  # noqa: S603 - our own adapter script
        [str(ADAPTERS[handler]), "--database-url", url, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"peer adapter ({handler}) failed: {done.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


KEYED_OWNERS = 10
"""Owners the keyed drain's jobs are spread over (one lane each)."""
KEYED_PRIORITIES = 10
"""Distinct priorities of the keyed drain's jobs (0-9, round robin)."""
KEYED_KEY = "bench.keyed"
KEYED_LIMIT = 1000
"""The keyed drain's concurrency limit: far above the pool's slots and claim batch, so
it never binds -- what the drain measures is the cost of honouring the key."""


def keyed_drain(url: str, jobs: int) -> dict[str, Any]:
    """The plain drain's adapter and kind, with the scheduler in use: the jobs spread
    over :data:`KEYED_OWNERS` owners, mixed priorities, one concurrency key."""
    return adapter_call(
        url,
        "kind",
        "--mode",
        "drain",
        "--jobs",
        str(jobs),
        "--concurrency",
        "16",
        "--owners",
        str(KEYED_OWNERS),
        "--priorities",
        str(KEYED_PRIORITIES),
        "--concurrency-key",
        KEYED_KEY,
        "--key-limit",
        str(KEYED_LIMIT),
    )


async def section_kinds(base_url: str, knobs: Knobs, run_id: str) -> dict[str, Any]:
    """Drain and pickup of the same no-op jobs run by the kind declared on the public API
    and by a bare engine handler, alternated (``kind``, ``engine``, ...) in the same
    minutes: the ratio is what the public API costs. Each round ends with the keyed drain
    (:func:`keyed_drain`): its ratio to the plain drain is what the scheduler costs."""
    url = with_database(base_url, f"atlas_bench_kinds_{run_id}")
    drains: dict[str, list[float]] = {"kind": [], "engine": []}
    pickups: dict[str, list[float]] = {"kind": [], "engine": []}
    keyed: list[float] = []
    try:
        for _ in range(knobs.kind_rounds):
            for handler in ("kind", "engine"):
                drain = adapter_call(
                    url,
                    handler,
                    "--mode",
                    "drain",
                    "--jobs",
                    str(knobs.kind_jobs),
                    "--concurrency",
                    "16",
                )
                drains[handler].append(float(drain["jobs_per_sec"]))
                latency = adapter_call(
                    url,
                    handler,
                    "--mode",
                    "latency",
                    "--jobs",
                    str(knobs.kind_latency_jobs),
                    "--interval-ms",
                    "20",
                    "--concurrency",
                    "1",
                )
                pickups[handler].append(float(latency["p50_ms"]))
            found = keyed_drain(url, knobs.keyed_jobs)
            if not found.get("verified"):
                raise RuntimeError(f"keyed drain not verified: {found}")
            keyed.append(float(found["jobs_per_sec"]))
    finally:
        await drop_database(url)
    drain_kind, drain_engine = max(drains["kind"]), max(drains["engine"])
    pickup_kind, pickup_engine = min(pickups["kind"]), min(pickups["engine"])
    log(
        f"kinds: drain {drain_kind:.0f} / {drain_engine:.0f} jobs/s, pickup p50 "
        f"{pickup_kind:.2f} / {pickup_engine:.2f} ms (public kind / engine handler); "
        f"keyed drain {max(keyed):.0f} jobs/s"
    )
    return {
        "jobs": knobs.kind_jobs,
        "rounds": knobs.kind_rounds,
        "drain_jobs_per_sec": drains,
        "pickup_p50_ms": pickups,
        "drain_ratio": round(drain_kind / drain_engine, 3),
        "pickup_ratio": round(pickup_kind / pickup_engine, 3),
        "keyed": {
            "jobs": knobs.keyed_jobs,
            "owners": KEYED_OWNERS,
            "priorities": KEYED_PRIORITIES,
            "key_limit": KEYED_LIMIT,
            "drain_jobs_per_sec": keyed,
            "ratio": round(max(keyed) / drain_kind, 3),
        },
    }


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _fmt_http(r: dict[str, Any]) -> str:
    return f"{r['rps']:,.0f} req/s (p50 {r['p50_ms']:.1f} / p99 {r['p99_ms']:.1f} ms)"


def goals(results: dict[str, Any], knobs_sizes: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Every ratio against its performance goal: figure, measured, baseline, ratio, goal, met."""
    rows: list[dict[str, Any]] = []
    http = results.get("http")
    if http:
        for name, goal in (
            ("create", 0.70),
            ("create_idempotent", 0.70),
            ("status_200", 0.80),
            ("status_304", 0.80),
        ):
            pair = http[name]
            rows.append(
                {
                    "figure": f"{pair['label']} (atlas / bare)",
                    "measured": _fmt_http(pair["atlas"]),
                    "baseline": _fmt_http(pair["bare"]),
                    "ratio": pair["ratio"],
                    "goal": f">= {goal:.2f}",
                    "met": pair["ratio"] >= goal,
                }
            )
    ops = results.get("operators")
    if ops:
        search = ops["search"]
        for name, ratio in search["ratios"].items():
            if name == "primary_key_read":
                continue
            rows.append(
                {
                    "figure": f"search page {name}: {search['large']:,} / {search['small']:,} jobs",
                    "measured": f"{search['p50_ms_large'][name]:.2f} ms",
                    "baseline": f"{search['p50_ms_small'][name]:.2f} ms",
                    "ratio": ratio,
                    "goal": "<= 2.00",
                    "met": ratio <= 2.0,
                }
            )
        resume = ops["bulk_resume"]
        rows.append(
            {
                "figure": f"bulk resume of {resume['jobs']:,} unresolved jobs / drain rate",
                "measured": f"{resume['bulk_resume_jobs_per_sec']:.0f} jobs/s",
                "baseline": f"{resume['drain_jobs_per_sec']:.0f} jobs/s",
                "ratio": resume["ratio"],
                "goal": ">= 0.50",
                "met": resume["ratio"] >= 0.5,
            }
        )
    kinds = results.get("kinds")
    if kinds:
        drains, pickups = kinds["drain_jobs_per_sec"], kinds["pickup_p50_ms"]
        rows.append(
            {
                "figure": f"drain of {kinds['jobs']:,} no-op jobs (public kind / engine handler)",
                "measured": f"{max(drains['kind']):.0f} jobs/s",
                "baseline": f"{max(drains['engine']):.0f} jobs/s",
                "ratio": kinds["drain_ratio"],
                "goal": ">= 0.95",
                "met": kinds["drain_ratio"] >= 0.95,
            }
        )
        rows.append(
            {
                "figure": "pickup p50, one job every 20 ms (public kind / engine handler)",
                "measured": f"{min(pickups['kind']):.2f} ms",
                "baseline": f"{min(pickups['engine']):.2f} ms",
                "ratio": kinds["pickup_ratio"],
                "goal": "<= 1.05",
                "met": kinds["pickup_ratio"] <= 1.05,
            }
        )
        keyed = kinds["keyed"]
        rows.append(
            {
                "figure": (
                    f"drain of {keyed['jobs']:,} jobs over {keyed['owners']} owners, "
                    f"{keyed['priorities']} priorities, one concurrency key "
                    f"(limit {keyed['key_limit']:,}) / plain drain"
                ),
                "measured": f"{max(keyed['drain_jobs_per_sec']):.0f} jobs/s",
                "baseline": f"{max(drains['kind']):.0f} jobs/s",
                "ratio": keyed["ratio"],
                "goal": ">= 0.90",
                "met": keyed["ratio"] >= 0.9,
            }
        )
    claim = results.get("claim")
    if claim:
        big, small = claim["sizes"][-1], claim["sizes"][0]
        asked = claim["requested_sizes"][-1]
        cut = f" (asked {asked:,}: time budget)" if claim["cut_by_budget"] else ""
        rows.append(
            {
                "figure": (
                    f"claim({small['limit']}) p50 at {big['queued']:,} / {small['queued']:,} "
                    f"queued{cut}"
                ),
                "measured": f"{big['p50_ms']:.2f} ms (p99 {big['p99_ms']:.2f})",
                "baseline": f"{small['p50_ms']:.2f} ms (p99 {small['p99_ms']:.2f})",
                "ratio": claim["ratio"],
                "goal": "<= 1.20",
                "met": claim["ratio"] <= 1.2 if len(claim["sizes"]) > 1 else None,
            }
        )
        fair = claim.get("fair_pickup")
        if fair:
            rows.append(
                {
                    "figure": (
                        f"pickup p99 of one owner's job behind another owner's "
                        f"{fair['backlog']:,} / on an empty queue"
                    ),
                    "measured": f"{fair['behind']['p99_ms']:.2f} ms",
                    "baseline": f"{fair['empty']['p99_ms']:.2f} ms",
                    "ratio": fair["p99_ratio"],
                    "goal": "<= 2.00",
                    "met": fair["p99_ratio"] <= 2.0,
                }
            )
    bloat = results.get("bloat")
    if bloat:
        big, small = bloat["stages"][-1], bloat["stages"][0]
        asked = knobs_sizes[-1] if knobs_sizes else big["requested"]
        churn_cut = f" (asked {asked:,}: time budget)" if bloat["cut_by_budget"] else ""
        rows.append(
            {
                "figure": (
                    f"jobs size after {big['churned']:,} / {small['churned']:,} churned{churn_cut}"
                ),
                "measured": mib(big["tables"]["jobs"]["total_bytes"]),
                "baseline": mib(small["tables"]["jobs"]["total_bytes"]),
                "ratio": bloat["ratio"],
                "goal": "<= 2.00",
                "met": bloat["ratio"] <= 2.0 if len(bloat["stages"]) > 1 else None,
            }
        )
        rows.append(
            {
                "figure": "jobs + job_history + attempts, same sizes",
                "measured": mib(big["hot_total_bytes"]),
                "baseline": mib(small["hot_total_bytes"]),
                "ratio": bloat["ratio_all"],
                "goal": "(reported)",
                "met": None,
            }
        )
    chart_results = results.get("charts")
    if chart_results:
        for name, label in (("chart_hour", "last hour"), ("chart_day", "last day")):
            rows.append(
                {
                    "figure": f"chart query, {label}, at {chart_results['jobs']:,} jobs "
                    "(/ a primary-key read)",
                    "measured": f"{chart_results[name + '_ms']:.2f} ms",
                    "baseline": f"{chart_results['pk_read_ms']:.3f} ms",
                    "ratio": chart_results["ratios"][name],
                    "goal": "<= 50 ms",
                    "met": chart_results[name + "_ms"] <= 50.0,
                }
            )
    peer_results = results.get("peers")
    if peer_results and "ratios" in peer_results:
        rows += peers.goal_rows(peer_results["ratios"], peers.baseline())
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    head = ["figure", "atlas / at the larger size", "baseline", "ratio", "goal", "met"]
    cells = [
        [
            r["figure"],
            r["measured"],
            r["baseline"],
            f"{r['ratio']:.2f}",
            r["goal"],
            "—" if r["met"] is None else ("yes" if r["met"] else "no"),
        ]
        for r in rows
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(lines)


def detail_tables(results: dict[str, Any]) -> str:
    out: list[str] = []
    claim = results.get("claim")
    if claim:
        out.append(
            "| queued | claims | p50 ms | p99 ms | mean ms | fill s | "
            "EXPLAIN ANALYZE: exec ms, buffers hit+read |"
        )
        out.append("|---|---|---|---|---|---|---|")
        for s in claim["sizes"]:
            out.append(
                f"| {s['queued']:,} | {s['claims']} x {s['limit']} | {s['p50_ms']:.2f} | "
                f"{s['p99_ms']:.2f} | {s['mean_ms']:.2f} | {s['fill_seconds']:.1f} | "
                f"{s['explain']['execution_ms']:.2f}, "
                f"{(s['explain']['shared_hit'] or 0) + (s['explain']['shared_read'] or 0)} |"
            )
        out.append("")
    bloat = results.get("bloat")
    if bloat:
        out.append(
            "| churned | jobs/s | jobs (heap + idx) | job_history (heap + idx) | "
            "attempts (heap + idx) | dead tuples in jobs | pruned | job rows left |"
        )
        out.append("|---|---|---|---|---|---|---|---|")
        for s in bloat["stages"]:
            t = s["tables"]

            def cell(name: str, t: dict[str, Any] = t) -> str:
                v = t[name]
                return f"{mib(v['total_bytes'])} ({mib(v['heap_bytes'])} + {mib(v['index_bytes'])})"

            out.append(
                f"| {s['churned']:,} | {s['jobs_per_sec']:,.0f} | {cell('jobs')} | "
                f"{cell('job_history')} | {cell('attempts')} | {t['jobs']['dead_tuples']:,} | "
                f"{s['pruned']:,} | {s['jobs_rows']:,} |"
            )
        out.append("")
        names = sorted(bloat["stages"][0]["tables"]["jobs"]["indexes"])
        out.append("| churned | jobs heap | " + " | ".join(names) + " | load average |")
        out.append("|---|---|" + "---|" * len(names) + "---|")
        for s in bloat["stages"]:
            jobs = s["tables"]["jobs"]
            sizes = " | ".join(mib(jobs["indexes"].get(name, 0)) for name in names)
            load = " ".join(f"{x:.1f}" for x in s["load_average"])
            out.append(f"| {s['churned']:,} | {mib(jobs['heap_bytes'])} | {sizes} | {load} |")
    return "\n".join(out)


async def run_suite(knobs: Knobs, base_url: str, run_id: str) -> dict[str, Any]:
    budget = Budget(time.perf_counter() + knobs.budget_seconds)
    results: dict[str, Any] = {}
    if "http" in knobs.sections:
        results["http"] = await section_http(base_url, knobs, run_id)
    if "kinds" in knobs.sections:
        results["kinds"] = await section_kinds(base_url, knobs, run_id)
    if "claim" in knobs.sections:
        results["claim"] = await section_claim(base_url, knobs, run_id, budget)
    if "bloat" in knobs.sections:
        results["bloat"] = await section_bloat(base_url, knobs, run_id, budget)
    if "operators" in knobs.sections:
        results["operators"] = await section_operators(base_url, knobs, run_id)
    if "charts" in knobs.sections:
        results["charts"] = await section_charts(base_url, knobs, run_id, budget)
    if "peers" in knobs.sections:
        results["peers"] = await asyncio.to_thread(section_peers, knobs)
    return results


PEERS_TIMEOUT_SECONDS = 900.0
"""The harness's own bound is 600 s per adapter call; a whole run at the defaults takes
about two minutes."""


def section_peers(knobs: Knobs) -> dict[str, Any]:
    """Atlas and PGQueuer in runs of the shared peer harness (:mod:`benchmarks.peers`),
    from a working copy of it (``BENCH_PEER_WORKDIR``); ``skipped`` with the reason when the
    harness is not there, ``failed`` with its output when it fails (the other sections'
    figures are reported all the same)."""
    folder = peers.harness()
    if folder is None:
        reason = "no peer harness (run_peers.sh) at BENCH_PEER_HARNESS or ../shared/bench"
        log(f"[bench] peers: skipped: {reason}")
        return {"skipped": reason}
    copy = peers.working_copy(folder, peers.workdir())
    runs: list[dict[str, Any]] = []
    for _ in range(max(knobs.peer_rounds, 1)):
        try:
            found = peers.run(
                copy,
                jobs=knobs.peer_jobs,
                single_jobs=knobs.peer_single_jobs,
                timeout=PEERS_TIMEOUT_SECONDS,
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            log(f"[bench] peers: failed: {exc}")
            return {"harness": str(folder), "failed": str(exc)}
        runs.append(
            {
                "run": found["meta"].get("stamp"),
                "path": found["path"],
                "ratios": peers.ratios(found["results"]),
                "results": found["results"],
            }
        )
        log(f"[bench] peers: {runs[-1]['ratios']} ({found['path']})")
    return {
        "harness": str(folder),
        "runs": runs,
        "ratios": peers.mean_ratios([r["ratios"] for r in runs]),
    }


async def section_operators(base_url: str, knobs: Knobs, run_id: str) -> dict[str, Any]:
    """Search pages at two table sizes, and a bulk resume against the drain rate
    (:mod:`benchmarks.operators`), each on a database of its own."""
    found: dict[str, Any] = {}
    async with (
        scratch_database(base_url, f"atlas_bench_search_s_{run_id}", knobs.keep_databases) as small,
        scratch_database(base_url, f"atlas_bench_search_l_{run_id}", knobs.keep_databases) as large,
    ):
        found["search"] = await operators.search(
            small,
            large,
            small=_int("BENCH_SEARCH_SMALL", 10_000),
            large=_int("BENCH_SEARCH_LARGE", 1_000_000),
            reads_n=_int("BENCH_SEARCH_READS", 50),
        )
    async with scratch_database(
        base_url, f"atlas_bench_bulk_{run_id}", knobs.keep_databases
    ) as url:
        found["bulk_resume"] = await operators.bulk_resume(url, n=_int("BENCH_BULK_JOBS", 10_000))
    log(f"[bench] operators: {found}")
    return found


CHARTS_SECONDS_PER_JOB = 130e-6
"""The charts section's fill and timings per filled job, as measured on the shared box."""


async def section_charts(
    base_url: str, knobs: Knobs, run_id: str, budget: Budget
) -> dict[str, Any]:
    """The operators' chart queries and the rollup's statements at ``BENCH_CHARTS_JOBS``
    jobs, against a primary-key read (:mod:`benchmarks.charts`); the table is cut to
    what the suite's time budget leaves (the JSON names the size reached)."""
    jobs = knobs.charts_jobs
    fits = int((budget.left() - SECTION_TAIL_SECONDS) / CHARTS_SECONDS_PER_JOB)
    if fits < jobs:
        jobs = max(100_000, fits)
        log(f"[bench] charts: {knobs.charts_jobs:,} jobs cut to {jobs:,}: time budget")
    async with scratch_database(
        base_url, f"atlas_bench_charts_{run_id}", knobs.keep_databases
    ) as url:
        fill_seconds = await charts.fill(url, jobs=jobs, history=knobs.charts_history)
        log(f"[bench] charts: filled in {fill_seconds:.1f} s")
        measured = await charts.measure(
            url, repeats=knobs.charts_repeats, recent=knobs.charts_recent
        )
    return {**measured, "fill_seconds": round(fill_seconds, 1)}


def main() -> None:
    knobs = Knobs.from_environment()
    os.environ.setdefault("ATLAS_LOG_LEVEL", "WARNING")
    from atlas_jobs._app.logs import configure_logging

    configure_logging(Settings())
    explicit = os.environ.get("DATABASE_URL")
    base_url = normalize_url(explicit) if explicit else resolve_database_url(Settings())
    started = datetime.now(UTC)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    run_id = uuid.uuid4().hex[:8]
    t0 = time.perf_counter()
    results = asyncio.run(run_suite(knobs, base_url, run_id))
    seconds = time.perf_counter() - t0
    rows = goals(results, knobs.churn_sizes)
    report: dict[str, Any] = {
        "run": stamp,
        "started_at": started.isoformat(),
        "seconds": round(seconds, 1),
        "version": package_version("atlas-jobs"),
        "environment": {
            "postgresql": asyncio.run(server_version(base_url)),
            "database": "DATABASE_URL" if explicit else "embedded",
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "knobs": knobs.as_json(),
        "results": results,
        "goals": rows,
    }
    knobs.results_dir.mkdir(parents=True, exist_ok=True)
    path = knobs.results_dir / f"bench-{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"\nmake bench: run {stamp}, {seconds:.0f} s, PostgreSQL "
        f"{report['environment']['postgresql']}\n"
    )
    print(table(rows))
    details = detail_tables(results)
    if details:
        print("\n" + details)
    for outcome in ("skipped", "failed"):
        if why := results.get("peers", {}).get(outcome):
            print(f"\npeers: {outcome}: {why[-2000:]}")
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
