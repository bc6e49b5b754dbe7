"""Debian's chromium for Playwright: installed by the test set-up when missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = [
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", *args], env=env, capture_output=True, text=True, timeout=420, check=False
    )


def ensure_chromium() -> Path:
    """``/usr/bin/chromium``, installing Debian's ``chromium`` package when it is missing
    (``apt-get update`` first when the package lists do not know it). Skips only when
    there is no apt at all; an apt that fails is a test failure."""
    if CHROMIUM.exists():
        return CHROMIUM
    if shutil.which("apt-get") is None:
        pytest.skip("no /usr/bin/chromium and no apt-get to install Debian's chromium package")
    installed = _apt("install", "-y", "-q", "--no-install-recommends", "chromium")
    if installed.returncode != 0:
        updated = _apt("update", "-q")
        assert updated.returncode == 0, updated.stderr[-2000:]
        installed = _apt("install", "-y", "-q", "--no-install-recommends", "chromium")
    assert installed.returncode == 0, installed.stderr[-2000:]
    assert CHROMIUM.exists(), "the chromium package did not install /usr/bin/chromium"
    return CHROMIUM
