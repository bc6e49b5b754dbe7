"""The wake-up herd: claims per job of N idle worker processes (the performance goals).

``python -m benchmarks.herd --database-url URL [--processes 4] [--concurrency 4]
[--jobs 300] [--rate 50]`` starts N real processes, each running one
:class:`~atlas_jobs._workers.pool.WorkerPool` (the adapter's noop pool, LISTEN as shipped), waits
until they are idle, then creates jobs one at a time at a fixed rate through the
adapter's producer (one ``create`` per job) and waits until every job succeeded. The
database named by URL is dropped, recreated and migrated first.

It prints one JSON line: claim statements and empty claims per job (counted in each
process around ``Transitions.claim_to_run``, the pool's claim), the server CPU per job
(utime+stime of every PostgreSQL process on this machine over the run: creation, claims,
publications and history included; ``--postmaster-pid`` names the server, the embedded
one's by default; null when neither is known), the pickup p50/p99 from the rows, and
the load average. Counts, not timings, are its point: the machine's load moves the latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from sqlalchemy import text

from atlas_jobs._app.db.engine import normalize_url
from atlas_jobs._app.logs import configure_logging
from atlas_jobs._app.settings import Settings
from atlas_jobs._workers import eventloop
from benchmarks.peer_adapter import Atlas, migrate, percentile, pickup_ms, reset_database

IDLE_SECONDS = 1.5
"""After start: the pool's first claims (start, LISTEN up) are done before counting."""


def server_cpu_seconds(postmaster_pid: int) -> float:
    """utime+stime of the postmaster and its children (the backends)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # the process ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(entry) == postmaster_pid or int(fields[1]) == postmaster_pid:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def embedded_postmaster_pid() -> int | None:
    """The embedded server's postmaster (``ATLAS_DATA_DIR``), if it runs here."""
    pid_file = Settings().data_dir / "pg" / "postmaster.pid"
    try:
        return int(pid_file.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _worker(
    url: str,
    concurrency: int,
    data_dir: str,
    out: Queue[dict[str, int]],
    ready: Event,
    done: Event,
) -> None:
    """One worker process: a pool whose claims are counted from idle on."""

    async def main() -> None:
        settings = Settings(DATABASE_URL=url, data_dir=Path(data_dir))
        configure_logging(settings)  # ATLAS_LOG_LEVEL (WARNING unless set): stdout stays JSON
        atlas = Atlas(url, settings)
        pool = atlas.pool(concurrency)
        counts = {"claims": 0, "empty": 0}
        claim = pool.transitions.claim_to_run

        async def counted(*args: Any, **kwargs: Any) -> Any:
            rows = await claim(*args, **kwargs)
            counts["claims"] += 1
            counts["empty"] += not rows
            return rows

        pool.transitions.claim_to_run = counted  # type: ignore[method-assign]
        stop = asyncio.Event()
        running = asyncio.create_task(pool.run(stop))
        await asyncio.sleep(IDLE_SECONDS)
        idle = dict(counts)
        ready.set()
        await asyncio.to_thread(done.wait)
        out.put({key: counts[key] - idle[key] for key in counts})
        stop.set()
        await running
        await atlas.close()

    eventloop.run(main())


async def _produce(url: str, data_dir: Path, jobs: int, rate: float) -> None:
    """Jobs one at a time at ``rate`` per second; returns once all succeeded."""
    atlas = Atlas(url, Settings(DATABASE_URL=url, data_dir=data_dir))
    try:
        await atlas.producer()
        start = time.perf_counter()
        for seq in range(jobs):
            delay = start + seq / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await atlas.enqueue_one(seq)
        while True:
            async with atlas.engine.connect() as conn:
                left = await conn.scalar(
                    text("SELECT count(*) FROM jobs WHERE state <> 'succeeded'")
                )
            if not left:
                return
            await asyncio.sleep(0.05)
    finally:
        await atlas.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--postmaster-pid", type=int, default=None)
    args = parser.parse_args()
    os.environ.setdefault("ATLAS_LOG_LEVEL", "WARNING")
    url = normalize_url(args.database_url)
    postmaster = args.postmaster_pid or embedded_postmaster_pid()
    asyncio.run(reset_database(url))
    migrate(url)
    spawn = mp.get_context("spawn")
    out: Queue[dict[str, int]] = spawn.Queue()
    done = spawn.Event()
    with tempfile.TemporaryDirectory(prefix="atlas-herd-") as data_dir:
        readies = [spawn.Event() for _ in range(args.processes)]
        workers = [
            spawn.Process(target=_worker, args=(url, args.concurrency, data_dir, out, ready, done))
            for ready in readies
        ]
        for worker in workers:
            worker.start()
        for ready in readies:
            ready.wait(60)
        cpu_before = server_cpu_seconds(postmaster) if postmaster else 0.0
        eventloop.run(_produce(url, Path(data_dir), args.jobs, args.rate))
        cpu = server_cpu_seconds(postmaster) - cpu_before if postmaster else None
        done.set()
        counts = [out.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(30)
    pickup = asyncio.run(pickup_ms(url))
    claims = sum(c["claims"] for c in counts)
    empty = sum(c["empty"] for c in counts)
    result = {
        "processes": args.processes,
        "concurrency": args.concurrency,
        "rate": args.rate,
        "jobs": args.jobs,
        "claims_per_job": round(claims / args.jobs, 3),
        "empty_claims_per_job": round(empty / args.jobs, 3),
        "server_cpu_ms_per_job": None if cpu is None else round(cpu * 1000 / args.jobs, 3),
        "pickup_p50_ms": percentile(pickup, 50),
        "pickup_p99_ms": percentile(pickup, 99),
        "claims_per_process": [c["claims"] for c in counts],
        "empty_claims_per_process": [c["empty"] for c in counts],
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result), file=sys.stdout, flush=True)


if __name__ == "__main__":
    main()
