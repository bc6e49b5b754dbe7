"""``make bench`` section ``peers``: Atlas against PGQueuer in the shared peer harness.

The harness (``run_peers.sh``, outside this repository: ``BENCH_PEER_HARNESS``, by default
``../shared/bench`` beside the checkout) starts its own PostgreSQL 15, installs PGQueuer
from PyPI in a virtualenv of its own, and measures each system through its adapter --
Atlas through ``benchmarks/peer-adapter``. It runs from a working copy
(``BENCH_PEER_WORKDIR``, by default ``.atlas/peer-harness``, git-ignored beside the
embedded PostgreSQL), which keeps its virtualenv and its runs: the harness's own folder
is only read. This section runs it with PGQueuer and Atlas
(no pgbench baselines, no Procrastinate), reads each run's JSON and reports Atlas over
PGQueuer in the same run for each figure, the mean over the runs, against the same
ratios measured before the scheduling work (``peer_baseline.json``: what "the peer
ratios do not fall" is held to). Without the harness the section is skipped and says
why.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BASELINE = Path(__file__).with_name("peer_baseline.json")
NOISE = 0.95
"""A ratio within 5 % under its baseline counts as level: single harness runs of one tree
move by a fifth (docs/performance.md)."""


@dataclass(frozen=True)
class Figure:
    """One of the harness's measurements, and which way is better."""

    name: str
    label: str
    higher_is_better: bool = True


FIGURES = (
    Figure("drain_c16", "drain of N jobs at C=16"),
    Figure("enqueue_bulk", "bulk enqueue (batches of 1,000)"),
    Figure("enqueue_one", "one-by-one enqueue"),
    Figure("pickup_p50", "pickup p50", higher_is_better=False),
)


def harness() -> Path | None:
    """The harness's folder, when it is there."""
    found = Path(os.environ.get("BENCH_PEER_HARNESS", REPO.parent / "shared" / "bench"))
    return found if (found / "run_peers.sh").is_file() else None


def figures(results: Sequence[Mapping[str, Any]], system: str) -> dict[str, float]:
    """A system's figures from the harness's ``results`` (the last of each, should the
    system appear twice)."""
    found: dict[str, float] = {}
    for row in results:
        if row.get("system") != system:
            continue
        mode, rate = row.get("mode"), row.get("jobs_per_sec")
        if mode == "drain" and row.get("concurrency") == 16 and rate:
            found["drain_c16"] = float(rate)
        elif mode == "enqueue" and rate:
            found["enqueue_bulk" if (row.get("batch_size") or 1) > 1 else "enqueue_one"] = float(
                rate
            )
        elif mode == "latency" and row.get("p50_ms"):
            found["pickup_p50"] = float(row["p50_ms"])
    return found


def ratios(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Atlas over PGQueuer in one run, each figure as measured (a rate: higher is
    better; the pickup's p50: lower is better)."""
    atlas, pgqueuer = figures(results, "atlas"), figures(results, "pgqueuer")
    return {
        f.name: round(atlas[f.name] / pgqueuer[f.name], 3)
        for f in FIGURES
        if f.name in atlas and pgqueuer.get(f.name)
    }


def mean_ratios(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each figure's mean over the runs that measured it."""
    names = [f.name for f in FIGURES if any(f.name in run for run in runs)]
    return {
        name: round(sum(found) / len(found), 3)
        for name in names
        if (found := [run[name] for run in runs if name in run])
    }


def baseline() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(BASELINE.read_text())
    return found


def goal_rows(measured: Mapping[str, float], before: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One goal row per figure: the ratio now against the ratio before the scheduling
    work, level within :data:`NOISE`."""
    rows: list[dict[str, Any]] = []
    for f in FIGURES:
        if f.name not in measured:
            continue
        now, then = measured[f.name], float(before["ratios"][f.name])
        met = now >= then * NOISE if f.higher_is_better else now <= then / NOISE
        rows.append(
            {
                "figure": f"peer harness: {f.label}, atlas / PGQueuer in the same run",
                "measured": f"{now:.2f}x",
                "baseline": f"{then:.2f}x before the scheduling work",
                "ratio": now / then if f.higher_is_better else then / now,
                "goal": "does not fall (>= 0.95 of before)",
                "met": met,
            }
        )
    return rows


def workdir() -> Path:
    """Where the harness's working copy is kept."""
    return Path(os.environ.get("BENCH_PEER_WORKDIR", REPO / ".atlas" / "peer-harness"))


def working_copy(folder: Path, into: Path) -> Path:
    """The harness's files copied to ``into`` (its virtualenv and earlier runs kept)."""
    shutil.copytree(
        folder, into, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".venv", "results")
    )
    return into


def run(folder: Path, *, jobs: int, single_jobs: int, timeout: float) -> dict[str, Any]:
    """One harness run (from ``folder``) with PGQueuer and Atlas; its JSON (``meta`` and
    ``results``). A failed run raises :class:`RuntimeError` with the harness's output."""
    env = {
        **os.environ,
        "EXTRA_PEERS": f"atlas={REPO / 'benchmarks' / 'peer-adapter'}",
        "PEERS": "pgqueuer",
        "SKIP_PGBENCH": "1",
        "CONCURRENCIES": "16",
        "N": str(jobs),
        "SINGLE_N": str(single_jobs),
    }
    env.pop("DATABASE_URL", None)  # the harness's own server, not ours
    done = subprocess.run(
        ["./run_peers.sh"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"run_peers.sh failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
    match = re.search(r"^results: (\S+)", done.stdout, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"run_peers.sh named no results file: {done.stdout[-1500:]}")
    path = Path(match.group(1))
    if not path.is_absolute():
        path = folder / path
    found: dict[str, Any] = json.loads(path.read_text())
    found["path"] = str(path)
    return found
