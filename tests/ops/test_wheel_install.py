"""The wheel, installed the way a user installs it, runs without the checkout.

Built from this tree, installed WITH its dependencies into a fresh virtualenv outside
the checkout (no ``--system-site-packages``, no ``--no-deps``: a dependency missing from
``pyproject.toml`` fails here; the ``installed_wheel`` fixture builds it once per run,
for tests/ops/test_new_user.py too), it migrates an empty database with the migrations
it carries and answers ``/readyz`` 200.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.ops.wheel import InstalledWheel, run, users_env
from tests.support import REPO, free_port

pytestmark = pytest.mark.slow


def test_the_wheel_installs_migrates_and_is_ready(
    empty_database: str, installed_wheel: InstalledWheel, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = users_env()
    venv = installed_wheel.venv

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
