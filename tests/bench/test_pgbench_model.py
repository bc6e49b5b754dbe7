"""Model A of ``benchmarks/pgbench_models`` is rendered from the product's statements and
runs under pgbench: one transaction claims queued no-op jobs and publishes them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.db.schema import job_history, jobs
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from benchmarks.pgbench_models import model_a

PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"


@pytest.mark.skipif(not Path(PGBENCH).exists(), reason="pgbench is not installed")
async def test_model_a_claims_and_publishes_with_the_products_statements(
    engine: AsyncEngine, transitions: Transitions, database_url: str, tmp_path: Path
) -> None:
    async with engine.begin() as conn:
        created = [
            await transitions.create(
                conn,
                NewJob(
                    owner="alice",
                    kind="atlas.noop",
                    kind_version=1,
                    input={"n": n},
                    max_attempts=3,
                    max_elapsed_seconds=3600,
                ),
                actor=Actor("client", "alice"),
            )
            for n in range(3)
        ]
    script = tmp_path / "model_a.sql"
    script.write_text(model_a.render())

    done = subprocess.run(
        [PGBENCH, "-n", "-t", "1", "-D", "batch=8", "-f", str(script), libpq_url(database_url)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    ids = [c.job.id for c in created]
    async with engine.connect() as conn:
        states = set((await conn.execute(select(jobs.c.state).where(jobs.c.id.in_(ids)))).scalars())
        moves = (
            await conn.execute(
                select(job_history.c.transition).where(job_history.c.job_id == ids[0])
            )
        ).scalars()
    assert states == {"succeeded"}
    assert sorted(moves) == ["claim", "create", "publish"]
