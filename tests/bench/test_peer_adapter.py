"""``benchmarks/peer-adapter`` honours the shared harness's adapter CLI.

Not a timing test: each mode runs at a tiny size through the executable the harness calls,
prints ONE JSON line on stdout, and verifies its own work in the database (every job
created, every drained job ``succeeded`` with its history rows, every timed job started)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from tests.support import REPO, Server, with_database

ADAPTER = REPO / "benchmarks" / "peer-adapter"


def _adapter(url: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [str(ADAPTER), "--database-url", url, *args],
        env={**os.environ, "ATLAS_LOG_LEVEL": "WARNING"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = done.stdout.splitlines()  # the harness reads ONE line
    result: dict[str, object] = json.loads(line)
    return result


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("mode", "args"),
    [
        ("enqueue", ("--jobs", "30", "--batch-size", "1")),
        ("enqueue", ("--jobs", "250", "--batch-size", "100")),
        ("drain", ("--jobs", "300", "--concurrency", "16")),
        ("latency", ("--jobs", "5", "--interval-ms", "10", "--warmup", "0.2")),
    ],
)
async def test_each_mode_reports_one_verified_result(
    pg_server: Server, mode: str, args: tuple[str, ...]
) -> None:
    name = f"bench_atlas_{uuid.uuid4().hex[:8]}"  # the adapter drops and creates it
    url = with_database(pg_server.admin_url, name)
    try:
        result = _adapter(url, "--mode", mode, *args)
    finally:
        await pg_server.drop_database(name)

    assert result["system"] == "atlas"
    assert result["mode"] == mode
    assert result["verified"] is True
    assert (
        result["event_loop"] == "uvloop"
    )  # the worker process's loop (atlas_jobs._workers.eventloop)
    if mode == "latency":
        p50, p99 = result["p50_ms"], result["p99_ms"]
        assert isinstance(p50, float)
        assert isinstance(p99, float)
        assert 0 < p50 <= p99
        assert result["jobs_started"] == 5
    else:
        rate = result["jobs_per_sec"]
        assert isinstance(rate, float)
        assert rate > 0
    if mode == "drain":
        assert result["done_in_db"] == 300
    if mode == "enqueue":
        assert result["queued_in_db"] == int(args[1])
