"""``python -m benchmarks.herd`` (the wake-up herd's measurement) runs at a tiny size.

Not a timing test: real worker processes, real PostgreSQL; it returns only once every
job it created has succeeded, and it prints ONE JSON line of claim counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from tests.support import REPO, Server, with_database


@pytest.mark.timeout(300)
async def test_the_herd_benchmark_counts_every_process_claims(pg_server: Server) -> None:
    name = f"bench_herd_{uuid.uuid4().hex[:8]}"  # the benchmark drops and creates it
    url = with_database(pg_server.admin_url, name)
    env = {**os.environ, "ATLAS_LOG_LEVEL": "WARNING"}
    if pg_server.embedded_data_dir is not None:  # the server CPU is read from its pid
        env["ATLAS_DATA_DIR"] = str(pg_server.embedded_data_dir)
    try:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "benchmarks.herd", "--database-url", url),
                *("--processes", "2", "--concurrency", "1", "--jobs", "10", "--rate", "50"),
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        await pg_server.drop_database(name)
    assert done.returncode == 0, done.stderr[-4000:]
    [line] = done.stdout.splitlines()
    result = json.loads(line)
    assert result["jobs"] == 10
    claims, empty = result["claims_per_process"], result["empty_claims_per_process"]
    assert len(claims) == 2
    assert sum(claims) - sum(empty) >= 1  # the jobs were claimed (all of them succeeded)
    assert all(e <= c for c, e in zip(claims, empty, strict=True))
    if pg_server.embedded_data_dir is not None:
        assert result["server_cpu_ms_per_job"] is not None
