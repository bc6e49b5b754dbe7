"""The README's quick start, run as written: its shell block is taken from README.md (not
copied here) and run by bash at the checkout against a real ``atlas-jobs serve`` (API and
a worker process) on this test's database, with what ``make run`` sets. It must succeed,
show what it promises, and leave no file behind in the checkout."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx

from tests.support import REPO, atlas_process, free_port

QUICK_START = re.compile(r"^## Quick start\n.*?^```bash\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# What `make run` sets for `atlas-jobs serve` (the Makefile's run recipe; checked below).
MAKE_RUN_ENV = {"ATLAS_WEBHOOK_INTERNAL_HOSTS": "localhost"}


def quick_start() -> str:
    found = QUICK_START.search((REPO / "README.md").read_text())
    assert found is not None, "README.md has no ## Quick start with a ```bash block"
    return found.group(1)


def checkout_state() -> set[str]:
    """What git sees changed or untracked in the checkout (pytest's own temporary
    folders aside, when a run puts them there)."""
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line for line in listed.splitlines() if not line[3:].startswith(".tmp-pytest")}


def test_make_run_lets_webhooks_reach_localhost() -> None:
    recipe = (REPO / "Makefile").read_text().split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert 'ATLAS_WEBHOOK_INTERNAL_HOSTS="$${ATLAS_WEBHOOK_INTERNAL_HOSTS-localhost}"' in recipe


def test_the_readme_starts_with_make_run_and_make_test() -> None:
    first = (REPO / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first.splitlines()] == [
        ["make", "run"],
        ["make", "test"],
    ]
    assert len((REPO / "README.md").read_text().splitlines()) < 300


def test_the_quick_start_runs_as_written(database_url: str, data_dir: Path, tmp_path: Path) -> None:
    block = quick_start()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": "quick-start-secret",
    }
    before = checkout_state()
    with atlas_process(
        ["serve", "--port", str(port), "--workers", "1"],
        env={**env, **MAKE_RUN_ENV},
        log_path=tmp_path / "serve.log",
        ready_url=f"{base}/readyz",
        timeout=120,
    ):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=REPO,
            env={**env, "ATLAS_URL": base, "TMPDIR": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        out = done.stdout
        assert "atlas.bundle" in out  # atlas-jobs kinds
        assert "Ready — download" in out
        assert "bundle/bundle.zip" in out.splitlines(), out
        (downloaded,) = tmp_path.glob("*/bundle/bundle.zip")  # in the session's mktemp -d
        assert downloaded.stat().st_size > 0
        assert "signature not checked" in out  # the receiver's line, from deliveries.log
        assert re.search(r"^(cancel_requested|canceled)$", out, re.MULTILINE), out
        assert "Canceled" in out
        assert "watch: the job did not succeed (exit 1)" in out
        with httpx.Client(base_url=base) as http:
            assert http.get("/readyz").status_code == 200
    assert checkout_state() == before  # nothing written into the checkout
    assert not (REPO / "deliveries.log").exists()
    assert not (REPO / "bundle").exists()
