"""``atlas-jobs submit --delay/--start-within``, ``status`` and ``reschedule`` against a
live API: the label and the timing lines say when the job may start."""

from __future__ import annotations

import json
from pathlib import Path

from tests.api.conftest import LiveApi
from tests.api.test_cli import cli


def test_submit_with_a_delay_shows_it_and_reschedule_moves_it(
    live_api: LiveApi, database_url: str, data_dir: Path
) -> None:
    base = {"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)}
    key = cli("keys", "create", "--owner", "dora", "--role", "client", env=base).stdout.strip()
    env = {**base, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    submitted = cli(
        "submit",
        "--kind",
        "atlas.noop",
        "--delay",
        "3600",
        "--start-within",
        "7200",
        "--json",
        env=env,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["run_at"] is not None
    assert job["start_by"] is not None

    shown = cli("status", job["id"], env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("Queued — scheduled for ")
    assert f"run at    {job['run_at']}" in lines
    assert f"start by  {job['start_by']}" in lines

    late = cli("reschedule", job["id"], "--delay", "9000", env=env)
    assert late.returncode != 0
    assert "start_by" in late.stderr
    dropped = cli("reschedule", job["id"], env=env)
    assert dropped.returncode == 0, dropped.stderr
    assert not dropped.stdout.startswith("Queued — scheduled")
    after = json.loads(cli("status", job["id"], "--json", env=env).stdout)
    assert after["run_at"] is None
    history = cli("history", job["id"], env=env)
    assert "reschedule" in history.stdout
