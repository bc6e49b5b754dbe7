"""``atlas-jobs keys create`` and the client verbs against a live API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, Driver
from tests.support import REPO


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **env},
    )


async def test_keys_create_then_client_verbs_over_http(
    live_api: LiveApi, database_url: str, data_dir: Path, driver: Driver, tmp_path: Path
) -> None:
    base = {"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)}
    created = cli("keys", "create", "--owner", "carol", "--role", "client", env=base)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("atlas_")
    listed = cli("keys", "list", "--owner", "carol", env=base)
    assert "carol" in listed.stdout
    assert key not in listed.stdout  # only the prefix is ever shown again

    client_env = {**base, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    submitted = cli(
        "submit", "--kind", "atlas.bundle", "--input", json.dumps(BUNDLE_INPUT), env=client_env
    )
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["state"] == "queued"
    job_id = job["id"]

    shown = cli("status", job_id, env=client_env)
    assert json.loads(shown.stdout)["id"] == job_id

    not_ready = cli("result", job_id, env=client_env)
    assert not_ready.returncode == 1
    assert "HTTP 409" in not_ready.stderr

    await driver.succeed(uuid.UUID(job_id), "carol", {"bundle.zip": b"zip-bytes"})
    watched = cli("watch", job_id, "--wait", "1", env=client_env)
    assert watched.returncode == 0, watched.stderr
    assert "Ready — download" in watched.stdout

    out = tmp_path / "out"
    fetched = cli("result", job_id, "--download", str(out), env=client_env)
    assert fetched.returncode == 0, fetched.stderr
    assert (out / "bundle.zip").read_bytes() == b"zip-bytes"

    too_late = cli("cancel", job_id, env=client_env)
    assert too_late.returncode == 1
    assert "succeeded" in too_late.stderr

    second = json.loads(cli("submit", "--kind", "atlas.noop", env=client_env).stdout)
    canceled = cli("cancel", second["id"], env=client_env)
    assert (canceled.returncode, canceled.stdout.strip()) == (0, "canceled")

    revoked = cli("keys", "revoke", listed.stdout.split()[0], env=base)
    assert revoked.returncode == 0
    refused = cli("status", job_id, env=client_env)
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr
