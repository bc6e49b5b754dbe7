"""The wheel, installed the way a user installs it, runs without the checkout.

Built from this tree, installed WITH its dependencies into a fresh virtualenv outside
the checkout (no ``--system-site-packages``, no ``--no-deps``: a dependency missing from
``pyproject.toml`` fails here; pip's cache keeps it quick), it migrates an empty
database with the migrations it carries and answers ``/readyz`` 200.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, free_port

pytestmark = pytest.mark.slow


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_installs_migrates_and_is_ready(empty_database: str, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"PYTHONPATH", "VIRTUAL_ENV", "DATABASE_URL", "PYTHONHOME"}
    }
    wheels = tmp_path / "wheels"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, REPO],
        cwd=outside,
        env=env,
    )
    [wheel] = wheels.glob("atlas_jobs-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=outside, env=env)
    run([venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], cwd=outside, env=env)

    env.update(DATABASE_URL=empty_database, ATLAS_DATA_DIR=str(tmp_path / "data"))
    located = run(
        [
            venv / "bin" / "python",
            "-c",
            "import atlas_jobs._app.db.migrations as m; print(m.script_location())",
        ],
        cwd=outside,
        env=env,
    ).strip()
    assert located.startswith(str(venv)), "the migrations come from the installed package"
    assert not located.startswith(str(REPO))

    # Before migrating, the server refuses to start, in one line.
    refused = subprocess.run(
        [str(venv / "bin" / "atlas-jobs"), "api"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert refused.returncode == 1
    assert "atlas-jobs migrate" in refused.stderr

    assert "database migrated to head" in run(
        [venv / "bin" / "atlas-jobs", "migrate"], cwd=outside, env=env
    )
    port = free_port()
    log_path = tmp_path / "api.log"
    with log_path.open("wb") as log:
        api = subprocess.Popen(
            [str(venv / "bin" / "atlas-jobs"), "api", "--port", str(port)],
            cwd=outside,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert api.poll() is None, log_path.read_text()
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        assert ready.json()["checks"] == {"database": "ok", "migrations": "ok", "draining": "no"}
        # The status page ships in the wheel: its templates and the vendored htmx.
        login = httpx.get(f"http://127.0.0.1:{port}/ui/login", timeout=10)
        assert login.status_code == 200
        assert 'name="api_key"' in login.text
        for name in ("htmx.min.js", "htmx-ext-sse.min.js", "ui.js", "ui.css"):
            served = httpx.get(f"http://127.0.0.1:{port}/ui/static/{name}", timeout=10)
            assert served.status_code == 200, name
            assert served.content == (REPO / "app" / "ui" / "static" / name).read_bytes()
    finally:
        api.terminate()
        api.wait(timeout=60)
