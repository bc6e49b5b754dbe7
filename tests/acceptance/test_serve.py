"""What `make run` does, on the embedded default: no DATABASE_URL, a fresh data dir.

`atlas-jobs migrate` starts the embedded PostgreSQL and migrates it; `atlas-jobs serve`
brings up the API and a worker process that stay up and run a job end to end; SIGTERM
stops them cleanly; `atlas-jobs db stop` stops the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support import REPO, atlas_process, free_port


def cli(*args: str, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"atlas-jobs {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def test_embedded_default_serves_until_stopped(tmp_path: Path) -> None:
    data_dir = tmp_path / "atlas"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        ATLAS_DATA_DIR=str(data_dir),
        ATLAS_BUNDLE_TIME_SCALE="0.01",
        ATLAS_POLL_INTERVAL_SECONDS="0.5",
        ATLAS_SHUTDOWN_GRACE_SECONDS="2",
    )
    port = free_port()
    try:
        cli("migrate", env=env)
        url = cli("db", "url", env=env).strip()
        assert url.startswith("postgresql+asyncpg://")
        assert "127.0.0.1" in url
        assert (data_dir / "pg" / "PG_VERSION").is_file()
        key = cli("keys", "create", "--owner", "alice", "--role", "client", env=env).strip()
        key = key.splitlines()[-1].strip()

        base = f"http://127.0.0.1:{port}"
        log_path = tmp_path / "serve.log"
        with atlas_process(
            ["serve", "--port", str(port)], env=env, log_path=log_path, ready_url=f"{base}/readyz"
        ) as serve:
            auth = {"Authorization": f"Bearer {key}"}
            created = httpx.post(
                f"{base}/v1/jobs",
                headers=auth,
                json={
                    "kind": "atlas.bundle",
                    "input": {"preset": "coast", "pages": ["cover"], "format": "text-bundle-v1"},
                },
            )
            assert created.status_code == 202, created.text
            job_url = base + created.headers["Location"]
            deadline = time.monotonic() + 60
            while (state := httpx.get(job_url, headers=auth).json()["state"]) != "succeeded":
                assert state not in {"failed", "canceled"}, state
                assert time.monotonic() < deadline, f"job stuck in {state}"
                time.sleep(0.2)
            assert serve.poll() is None, "serve must stay up"
            assert f"Atlas Jobs: API {base}/v1" in log_path.read_text(), "serve names its URLs"

            os.killpg(serve.pid, signal.SIGTERM)
            code = serve.wait(timeout=30)
        assert code == 0, log_path.read_text()
    finally:
        cli("db", "stop", env=env)
    assert not (data_dir / "pg" / "postmaster.pid").exists()
