"""``atlas-jobs serve`` and the embedded PostgreSQL, as a person meets them: a serve that
had to start the embedded server stops it when it ends -- refused (not migrated) or
stopped with Ctrl-C (SIGINT) -- and says so; one that found it running leaves it running
and says how to stop it. Real processes, a fresh data directory, no DATABASE_URL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from atlas_jobs._app.db import embedded
from tests.support import REPO, free_port

pytestmark = pytest.mark.slow


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def serve_until_interrupted(env: dict[str, str], log_path: Path) -> tuple[int, str]:
    """``serve`` until ready, then SIGINT to it alone (as Ctrl-C reaches it; its children
    run in process groups of their own): its exit code and everything it printed."""
    port = free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "atlas_jobs._app.cli", "serve", "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log_path.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return code, log_path.read_text()


def test_serve_stops_the_embedded_server_it_started_and_keeps_one_it_found(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "atlas"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(ATLAS_DATA_DIR=str(data_dir), ATLAS_SHUTDOWN_GRACE_SECONDS="2")
    try:
        # A refused start (not migrated) stops the server it had to start.
        refused = run("serve", "--port", str(free_port()), env=env)
        assert refused.returncode == 1, refused
        assert "atlas-jobs migrate" in refused.stderr
        assert "stopped the embedded PostgreSQL" in refused.stdout
        assert not embedded.is_running(data_dir)

        # Found running (migrate started it): Ctrl-C leaves it running, and says so.
        assert run("migrate", env=env).returncode == 0
        assert embedded.is_running(data_dir)
        code, printed = serve_until_interrupted(env, tmp_path / "kept.log")
        assert code == 0, printed
        assert "keeps running" in printed
        assert "atlas-jobs db stop" in printed
        assert embedded.is_running(data_dir)

        # Started by serve itself: Ctrl-C stops it.
        assert run("db", "stop", env=env).returncode == 0
        assert not embedded.is_running(data_dir)
        code, printed = serve_until_interrupted(env, tmp_path / "stopped.log")
        assert code == 0, printed
        assert "stopped the embedded PostgreSQL" in printed
        assert not embedded.is_running(data_dir)
    finally:
        embedded.stop(data_dir)
