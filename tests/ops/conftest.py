"""Fixtures of the operations tests."""

from __future__ import annotations

import fcntl
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.ops.wheel import InstalledWheel, run, users_env
from tests.support import REPO, Server


@pytest.fixture
async def empty_database(pg_server: Server) -> AsyncIterator[str]:
    """A new database with nothing in it (not migrated), dropped afterwards."""
    name = f"atlas_empty_{uuid.uuid4().hex[:8]}"
    url = await pg_server.create_database(name)
    yield url
    await pg_server.drop_database(name)


@pytest.fixture(scope="session")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    """Built and installed once per run: ``pip wheel --no-deps`` from this tree, then
    ``pip install`` WITH its dependencies into a fresh virtualenv (no
    ``--system-site-packages``, no ``--no-deps``: a dependency missing from
    ``pyproject.toml`` fails here; pip's cache and the local index keep it quick).

    Under pytest-xdist the workers share one build (a lock in the run's base temporary
    directory), so the tests that use it cost one wheel and one virtualenv in all."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, shared by its workers
    root = base / "installed-wheel"
    venv = root / "venv"
    with (base / "installed-wheel.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "installed"
        if not done.exists():
            outside = root / "elsewhere"
            outside.mkdir(parents=True, exist_ok=True)
            env = users_env()
            wheels = root / "wheels"
            run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, REPO],
                cwd=outside,
                env=env,
            )
            [wheel] = wheels.glob("atlas_jobs-*.whl")
            run([sys.executable, "-m", "venv", venv], cwd=outside, env=env)
            run(
                [venv / "bin" / "python", "-m", "pip", "install", "-q", wheel], cwd=outside, env=env
            )
            done.write_text(str(wheel))
        wheel = Path(done.read_text())
    return InstalledWheel(wheel=wheel, venv=venv)
