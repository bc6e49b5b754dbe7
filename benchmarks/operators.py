"""The ``operators`` section of ``make bench``: what an operator's search and bulk
resume cost.

``search``
    ``jobs`` filled (``INSERT ... SELECT generate_series``, time-ordered ids) with the
    mix an operator searches: forty owners, mostly succeeded, 2 % failed
    (``error.code`` ``cannot_build``), 0.33 % unresolved ``document.publish`` jobs (last
    error ``destination_down``) -- but at least :data:`MIN_UNRESOLVED`, the oldest jobs
    made up to it, so the runbook's filter has a next page at small sizes too (from
    6,300 jobs up the mix is exactly the 0.33 %) -- every tenth job tagged ``batch=<n>``
    (one of 100).
    Two databases, one of ``BENCH_SEARCH_SMALL`` jobs and one of ``BENCH_SEARCH_LARGE``,
    filled the same way and ``VACUUM ANALYZE``d; then one search page (20 jobs,
    ``reads.list_jobs``, the route's query) is read on each in turn,
    ``BENCH_SEARCH_READS`` rounds, per filter: across owners with none,
    ``state=unresolved&kind=document.publish`` (the runbook's), a tag, one owner,
    ``state=failed&error_code=cannot_build``, and the runbook's again on its next page
    (a cursor); and a primary-key read for scale. Alternating the two sizes puts both in
    the same minutes of a shared machine. Ratio per filter: p50 at the large size / p50
    at the small one. The large table's plans are kept in the report.
``bulk_resume``
    A real ``atlas-jobs worker`` process (``--concurrency 16``) drains
    ``BENCH_BULK_JOBS`` queued ``atlas.noop`` jobs (the drain rate: jobs/s from the
    first job finished to the last); then the same process runs a bulk resume of as
    many unresolved jobs (of a kind no worker serves, so they stay queued) accepted
    with the runbook's filter. Its rate: jobs / (``finished_at - started_at``), database
    time. Ratio: bulk resume rate / drain rate.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import SYSTEM_CLOCK
from atlas_jobs._app.db import bulk, reads
from atlas_jobs._app.db.engine import create_engine
from atlas_jobs._app.db.schema import jobs

REPO = Path(__file__).resolve().parents[1]

SEARCH_FILL = text("""
WITH filled AS (
INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, created_at, finished_at, attempt, charged_attempts,
                  last_error, error, delivery_state, result_ref, tags)
SELECT atlas_uuid_v7(), 'owner-' || (g % 40),
       CASE WHEN unresolved THEN 'document.publish' ELSE 'atlas.noop' END, 1, '{}'::jsonb,
       CASE WHEN unresolved THEN 'unresolved' WHEN g % 50 = 0 THEN 'failed'
            ELSE 'succeeded' END,
       CASE WHEN unresolved THEN 'retries_exhausted' WHEN g % 50 = 0 THEN 'error'
            ELSE 'published' END,
       3, 600, now(),
       CASE WHEN unresolved THEN NULL ELSE now() END, 1, 1,
       CASE WHEN unresolved
            THEN '{"code": "destination_down", "message": "timed out", "retryable": true}'::jsonb
       END,
       CASE WHEN NOT unresolved AND g % 50 = 0
            THEN '{"code": "cannot_build", "message": "no", "retryable": false}'::jsonb
       END,
       CASE WHEN NOT unresolved AND g % 50 <> 0 THEN 'expired' ELSE 'none' END,
       CASE WHEN NOT unresolved AND g % 50 <> 0 THEN '{"files": []}'::jsonb END,
       CASE WHEN g % 10 = 0 THEN ARRAY['batch=' || (g / 10 % 100)] ELSE '{}'::text[] END
  FROM (SELECT g, g % 300 = 0 OR g <= CAST(:extra_unresolved AS bigint) AS unresolved
          FROM generate_series(CAST(:start AS bigint), CAST(:stop AS bigint)) AS g) AS s
RETURNING id, tags
)
INSERT INTO job_tags (tag, job_id) SELECT unnest(tags), id FROM filled
""")
FILL_CHUNK = 100_000
PAGE = reads.JobFilter(owner=None).limit
"""A search page (the listing's default, 20 jobs)."""
MIN_UNRESOLVED = PAGE + 1
"""Unresolved jobs a search table holds at least: a full first page of the runbook's
filter and a next page to read with its cursor. Below 6,300 jobs the 0.33 % (one job in
300) falls short, and the oldest jobs are made unresolved up to it (``g`` 1 to 21 at
most: never one of the failed, every 50th, nor of the tagged batch=7). Not two full
pages: the default small size (10,000 jobs, 33 unresolved) would then change."""

STUCK = text("""
WITH stuck AS (
INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds, attempt, charged_attempts, last_error, tags)
SELECT atlas_uuid_v7(), 'owner-' || (g % 40), 'bench.unserved', 1, '{}'::jsonb,
       'unresolved', 'retries_exhausted', 3, 600, 3, 3,
       '{"code": "destination_down", "message": "timed out", "retryable": true}'::jsonb,
       ARRAY['dest=down']
  FROM generate_series(1, :n) AS g
RETURNING id, tags
)
INSERT INTO job_tags (tag, job_id) SELECT unnest(tags), id FROM stuck
""")
QUEUED = text("""
INSERT INTO jobs (id, owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT atlas_uuid_v7(), 'bench', 'atlas.noop', 1, '{}'::jsonb, 'queued', 'new', 3, 600
  FROM generate_series(1, :n) AS g
""")

FILTERS: dict[str, reads.JobFilter] = {
    "every_owner": reads.JobFilter(owner=None),
    "unresolved_kind": reads.JobFilter(
        owner=None, states=["unresolved"], kinds=["document.publish"]
    ),
    "tag": reads.JobFilter(owner=None, tags=["batch=7"]),
    "one_owner": reads.JobFilter(owner=None, owners=["owner-3"]),
    "failed_error_code": reads.JobFilter(
        owner=None, states=["failed"], error_codes=["cannot_build"]
    ),
}


def log(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


def _extra_unresolved(size: int) -> int:
    """How many of the oldest jobs are made unresolved beyond every 300th (see
    :data:`MIN_UNRESOLVED`); 0 from 6,300 jobs up."""
    return max(0, MIN_UNRESOLVED - size // 300)


async def _fill(conn: AsyncConnection, start: int, stop: int) -> None:
    extra = _extra_unresolved(stop)
    for first in range(start, stop + 1, FILL_CHUNK):
        last = min(first + FILL_CHUNK - 1, stop)
        await conn.execute(SEARCH_FILL, {"start": first, "stop": last, "extra_unresolved": extra})


def _pages() -> dict[str, reads.JobFilter]:
    return dict(FILTERS)


async def _read_ms(conn: AsyncConnection, page: reads.JobFilter) -> float:
    t0 = time.perf_counter()
    rows = await reads.list_jobs(conn, page)
    elapsed = time.perf_counter() - t0
    assert rows, page
    return elapsed * 1000


async def _pk_ms(conn: AsyncConnection, job_id: Any) -> float:
    t0 = time.perf_counter()
    await reads.get_job(conn, job_id, owner=None)
    return (time.perf_counter() - t0) * 1000


async def _plan(conn: AsyncConnection, page: reads.JobFilter) -> str:
    """The plan's nodes, top down, for the report (which index each page walks)."""
    query = reads.listing_query(page, select(jobs))
    compiled = query.compile(conn.engine, compile_kwargs={"literal_binds": True})
    rows = await conn.execute(text(f"EXPLAIN {compiled}"))
    nodes = [r[0].strip().removeprefix("->  ").split("  (")[0] for r in rows]
    return " / ".join(n for n in nodes if not n.startswith(("Filter", "Index Cond", "Recheck")))


async def search(
    url_small: str, url_large: str, *, small: int, large: int, reads_n: int
) -> dict[str, Any]:
    """Both tables filled first, then every page read on each in turn (the same minutes
    of a shared machine for both sizes)."""
    engines = [
        create_engine(u, pool_size=1, application_name="atlas-bench-search")
        for u in (url_small, url_large)
    ]
    try:
        conns = [await e.connect() for e in engines]
        for conn, size in zip(conns, (small, large), strict=True):
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            t0 = time.perf_counter()
            await _fill(conn, 1, size)
            await conn.execute(text("VACUUM ANALYZE jobs, job_tags"))
            log(f"[bench] search: {size:,} jobs in {time.perf_counter() - t0:.1f} s")
        pages = _pages()
        for name in ("unresolved_kind",):
            first = [await reads.list_jobs(conn, pages[name]) for conn in conns]
        next_pages = [
            reads.JobFilter(
                owner=None,
                states=["unresolved"],
                kinds=["document.publish"],
                before_id=rows[PAGE - 1].id,
            )
            for rows in first
        ]
        ids = [(await c.execute(select(jobs.c.id).limit(1))).scalar_one() for c in conns]
        times: dict[str, list[list[float]]] = {
            name: [[], []] for name in [*pages, "unresolved_kind_next_page", "primary_key_read"]
        }
        for _ in range(reads_n):
            for i, conn in enumerate(conns):
                for name, page in pages.items():
                    times[name][i].append(await _read_ms(conn, page))
                times["unresolved_kind_next_page"][i].append(await _read_ms(conn, next_pages[i]))
                times["primary_key_read"][i].append(await _pk_ms(conn, ids[i]))
        plans = {name: await _plan(conns[1], page) for name, page in pages.items()}
        plans["unresolved_kind_next_page"] = await _plan(conns[1], next_pages[1])
        for conn in conns:
            await conn.close()
    finally:
        for engine in engines:
            await engine.dispose()
    p50 = {name: [statistics.median(t[0]), statistics.median(t[1])] for name, t in times.items()}
    return {
        "small": small,
        "large": large,
        "p50_ms_small": {k: round(v[0], 3) for k, v in p50.items()},
        "p50_ms_large": {k: round(v[1], 3) for k, v in p50.items()},
        "ratios": {k: round(v[1] / v[0], 2) for k, v in p50.items()},
        "plans_large": plans,
    }


def _worker(url: str, data_dir: str, log_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATLAS_")}
    env |= {
        "DATABASE_URL": url,
        "ATLAS_DATA_DIR": data_dir,
        "ATLAS_LOG_LEVEL": "WARNING",
        "ATLAS_BULK_INTERVAL_SECONDS": "0.1",
    }
    with log_path.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "atlas_jobs._app.cli", "worker", "--concurrency", "16"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def bulk_resume(url: str, *, n: int) -> dict[str, Any]:
    engine = create_engine(url, pool_size=2, application_name="atlas-bench-bulk")
    try:
        async with engine.begin() as conn:
            await conn.execute(STUCK, {"n": n})
            await conn.execute(QUEUED, {"n": n})
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.execute(text("VACUUM ANALYZE jobs, job_tags"))
        with tempfile.TemporaryDirectory(prefix="atlas-bench-bulk-") as tmp:
            worker = _worker(url, tmp, Path(tmp) / "worker.log")
            try:
                drain = await _drained(engine, n, worker)
                async with engine.begin() as conn:
                    accepted = await bulk.accept(
                        conn,
                        action="resume",
                        page=reads.JobFilter(
                            owner=None, states=["unresolved"], kinds=["bench.unserved"]
                        ),
                        job_ids=None,
                        note="bench",
                        requested_by="operator:bench",
                        key_id=None,
                        kinds=None,
                        clock_params=SYSTEM_CLOCK.bind(),
                    )
                ended = await _ended(engine, accepted.id, worker)
            finally:
                worker.terminate()
                worker.wait(timeout=30)
    finally:
        await engine.dispose()
    seconds = (ended.finished_at - ended.started_at).total_seconds()
    rate = n / seconds
    return {
        "jobs": n,
        "drain_jobs_per_sec": round(drain, 1),
        "bulk_resume_jobs_per_sec": round(rate, 1),
        "bulk_resume_seconds": round(seconds, 3),
        "done": ended.done,
        "ratio": round(rate / drain, 2),
    }


async def _drained(engine: Any, n: int, worker: subprocess.Popen[bytes]) -> float:
    query = text(
        "SELECT count(*) AS done, min(finished_at) AS first, max(finished_at) AS last"
        " FROM jobs WHERE kind = 'atlas.noop' AND state = 'succeeded'"
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError("the bench worker exited")
        async with engine.connect() as conn:
            row = (await conn.execute(query)).one()
        if row.done >= n:
            seconds = float((row.last - row.first).total_seconds())
            return float(n - 1) / max(seconds, 1e-6)
        await asyncio.sleep(0.2)
    raise RuntimeError("the drain did not finish")


async def _ended(engine: Any, operation_id: Any, worker: subprocess.Popen[bytes]) -> Any:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError("the bench worker exited")
        async with engine.connect() as conn:
            row = await bulk.get(conn, operation_id)
        if row is not None and row.state in ("succeeded", "failed", "canceled"):
            if row.state != "succeeded":
                raise RuntimeError(f"bulk operation {row.state}: {row.error}")
            return row
        await asyncio.sleep(0.1)
    raise RuntimeError("the bulk operation did not finish")
