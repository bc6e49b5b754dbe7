"""Two ``atlas-jobs migrate`` runs against one database at once -- two replicas each
migrating on deploy -- take turns (``atlas_jobs._app.db.migrations.MIGRATION_LOCK_TRY``): both wait
while another migration holds the lock, then one migrates and the other finds the schema
at head. Without the lock they would race over the same DDL; blocked inside
``pg_advisory_lock`` instead of trying, the waiting run would deadlock with the running
one's ``CREATE INDEX CONCURRENTLY``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from atlas_jobs._app.db import migrations
from atlas_jobs._app.db.engine import libpq_url
from tests.support import REPO


def migrate(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "atlas_jobs._app.cli", "migrate"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )


async def test_migrations_started_together_take_turns(
    empty_database: str, data_dir: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "ATLAS_DATA_DIR": str(data_dir), "DATABASE_URL": empty_database}
    logs = [tmp_path / "first.err", tmp_path / "second.err"]
    holder = await asyncpg.connect(libpq_url(empty_database))
    runs: list[subprocess.Popen[str]] = []
    try:
        # An earlier migration holds the lock while both start.
        assert await holder.fetchval(migrations.MIGRATION_LOCK_TRY.text)
        runs = [migrate(env, log) for log in logs]
        deadline = time.monotonic() + 60
        while not all(migrations.MIGRATION_WAITING in log.read_text() for log in logs):
            exited = [
                log.read_text()
                for run, log in zip(runs, logs, strict=True)
                if run.poll() is not None
            ]
            assert not exited, f"a migration did not wait for the lock: {exited}"
            assert time.monotonic() < deadline, "the migrations never waited for the lock"
            await asyncio.sleep(0.1)
        # Nothing was migrated while they waited.
        assert await holder.fetchval("SELECT to_regclass('alembic_version')") is None
        assert await holder.fetchval(migrations.MIGRATION_UNLOCK.text)
        outs = [(await asyncio.to_thread(run.communicate, timeout=120))[0] for run in runs]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
                run.wait()
        versions = {row[0] for row in await holder.fetch("SELECT version_num FROM alembic_version")}
        await holder.close()
    for run, out, log in zip(runs, outs, logs, strict=True):
        assert run.returncode == 0, log.read_text()
        assert "database migrated to head" in out
    assert versions == migrations.heads()
