"""The wheel of this tree installed the way a user installs it (the ``installed_wheel``
fixture of tests/ops/conftest.py), and running commands the way a user's shell does."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

# What a user's shell would not have: the checkout's interpreter settings, and the
# database and kinds this suite's own processes use.
_NOT_A_USERS = {
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "DATABASE_URL",
    "PYTHONHOME",
    "ATLAS_KINDS",
    "ATLAS_BUILTIN_KINDS",
    "ATLAS_KIND_ENTRY_POINTS",
}


def run(args: list[str | Path], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run a command to completion; its stdout, or the test fails showing both streams."""
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def users_env() -> dict[str, str]:
    """This process's environment without what only the checkout's suite sets."""
    return {k: v for k, v in os.environ.items() if k not in _NOT_A_USERS}


@dataclass(frozen=True)
class InstalledWheel:
    """The wheel of this tree, installed with its dependencies in a virtualenv of its own
    outside the checkout."""

    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def atlas_jobs(self) -> Path:
        """The console script, as a user runs it."""
        return self.venv / "bin" / "atlas-jobs"
