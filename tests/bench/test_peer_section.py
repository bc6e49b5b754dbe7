"""``make bench`` section ``peers``: how it calls the shared peer harness and reads its run.

The real harness (outside the repository) needs PostgreSQL 15 and PGQueuer from PyPI and
two minutes; here a stand-in ``run_peers.sh`` checks what it is asked for and answers in
the harness's format, so what is tested is the contract: the environment the section
passes, the results file it finds, the ratios and the goal rows it makes of them."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from benchmarks import peers
from benchmarks.suite import Knobs, goals, section_peers

# One run as the harness writes it (``results/peers-<stamp>.json``), trimmed.
RUN: list[dict[str, Any]] = [
    {"system": "pgqueuer", "mode": "drain", "concurrency": 16, "jobs_per_sec": 8000.0},
    {"system": "pgqueuer", "mode": "enqueue", "batch_size": 1000, "jobs_per_sec": 50000.0},
    {"system": "pgqueuer", "mode": "enqueue", "batch_size": 1, "jobs_per_sec": 2000.0},
    {"system": "pgqueuer", "mode": "latency", "jobs_per_sec": None, "p50_ms": 4.0},
    {"system": "atlas", "mode": "drain", "concurrency": 16, "jobs_per_sec": 10000.0},
    {"system": "atlas", "mode": "enqueue", "batch_size": 1000, "jobs_per_sec": 25000.0},
    {"system": "atlas", "mode": "enqueue", "batch_size": 1, "jobs_per_sec": 1600.0},
    {"system": "atlas", "mode": "latency", "jobs_per_sec": None, "p50_ms": 3.0},
]

# The stand-in harness: refuses anything but PGQueuer and Atlas's adapter without
# pgbench, then writes RUN (read from its folder) where the real one writes its runs.
STAND_IN = """#!/bin/sh
set -e
[ "$PEERS" = pgqueuer ] || { echo "PEERS=$PEERS" >&2; exit 2; }
[ "$SKIP_PGBENCH" = 1 ] || { echo "SKIP_PGBENCH=$SKIP_PGBENCH" >&2; exit 2; }
case "$EXTRA_PEERS" in atlas=*/benchmarks/peer-adapter) ;; *) echo "$EXTRA_PEERS" >&2; exit 2;; esac
[ -x "${EXTRA_PEERS#atlas=}" ] || { echo "not executable: $EXTRA_PEERS" >&2; exit 2; }
[ -z "$DATABASE_URL" ] || { echo "DATABASE_URL leaked" >&2; exit 2; }
mkdir -p results
printf '{"meta": {"stamp": "s-1", "jobs": %s, "concurrencies": ["%s"]}, "results": %s}\\n' \\
    "$N" "$CONCURRENCIES" "$(cat run.json)" > results/peers-s-1.json
echo "results: results/peers-s-1.json   (raw: x)   wall: 1 s"
"""


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str, **files: str) -> Path:
    """A harness folder holding ``script`` as its run_peers.sh (and ``files``), named by
    BENCH_PEER_HARNESS; its working copy under ``tmp_path``."""
    harness = tmp_path / "harness"
    harness.mkdir()
    run_peers = harness / "run_peers.sh"
    run_peers.write_text(script)
    run_peers.chmod(run_peers.stat().st_mode | stat.S_IXUSR)
    for name, content in files.items():
        (harness / name).write_text(content)
    monkeypatch.setenv("BENCH_PEER_HARNESS", str(harness))
    monkeypatch.setenv("BENCH_PEER_WORKDIR", str(tmp_path / "workdir"))
    return harness


def test_ratios_are_atlas_over_pgqueuer_in_the_same_run() -> None:
    assert peers.ratios(RUN) == {
        "drain_c16": 1.25,
        "enqueue_bulk": 0.5,
        "enqueue_one": 0.8,
        "pickup_p50": 0.75,  # lower is better
    }
    # A figure one side lacks (a failed adapter call) is left out, not divided by zero.
    assert "drain_c16" not in peers.ratios([r for r in RUN if r["mode"] != "drain"])


def test_the_runs_ratios_are_averaged_figure_by_figure() -> None:
    assert peers.mean_ratios([{"drain_c16": 0.8, "pickup_p50": 1.0}, {"drain_c16": 1.2}]) == {
        "drain_c16": 1.0,
        "pickup_p50": 1.0,
    }


def test_each_ratio_is_held_to_its_value_before_the_scheduling_work() -> None:
    before = {
        "ratios": {"drain_c16": 1.2, "enqueue_bulk": 0.7, "enqueue_one": 0.8, "pickup_p50": 1.0}
    }
    rows = {row["figure"]: row for row in peers.goal_rows(peers.ratios(RUN), before)}
    assert len(rows) == 4
    met = {
        figure.removeprefix("peer harness: ").removesuffix(", atlas / PGQueuer in the same run"): (
            row["met"]
        )
        for figure, row in rows.items()
    }
    assert met == {
        "drain of N jobs at C=16": True,  # 1.25 >= 1.2
        "bulk enqueue (batches of 1,000)": False,  # 0.50 < 0.95 x 0.70
        "one-by-one enqueue": True,  # level
        "pickup p50": True,  # 0.75 of PGQueuer's, below 1.0
    }
    # The committed baseline has every figure.
    assert set(peers.baseline()["ratios"]) == {f.name for f in peers.FIGURES}


def test_the_section_runs_the_harness_and_reports_a_goal_row_per_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = stand_in(tmp_path, monkeypatch, STAND_IN, **{"run.json": json.dumps(RUN)})
    monkeypatch.setenv("DATABASE_URL", "postgresql://ours/not-the-harness")
    monkeypatch.setenv("BENCH_PEER_JOBS", "300")
    monkeypatch.setenv("BENCH_PEER_ROUNDS", "2")

    found = section_peers(Knobs.from_environment())

    assert [run["run"] for run in found["runs"]] == ["s-1", "s-1"]  # two rounds
    # Run from a working copy; the harness's folder is only read.
    copy = tmp_path / "workdir"
    assert found["runs"][0]["path"] == str(copy / "results" / "peers-s-1.json")
    assert not (harness / "results").exists()
    assert found["ratios"]["drain_c16"] == 1.25
    stored = json.loads(Path(found["runs"][0]["path"]).read_text())
    assert stored["meta"]["jobs"] == 300  # BENCH_PEER_JOBS reached the harness as N
    assert stored["meta"]["concurrencies"] == ["16"]
    rows = [row for row in goals({"peers": found}) if row["figure"].startswith("peer harness")]
    assert len(rows) == len(peers.FIGURES)


def test_without_the_harness_the_section_is_skipped_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_PEER_HARNESS", str(tmp_path / "nowhere"))
    found = section_peers(Knobs.from_environment())
    assert "no peer harness" in found["skipped"]
    assert goals({"peers": found}) == []


def test_a_failing_harness_is_reported_with_its_output_and_no_goal_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stand_in(tmp_path, monkeypatch, "#!/bin/sh\necho 'initdb: could not start' >&2\nexit 3\n")
    found = section_peers(Knobs.from_environment())
    assert "initdb: could not start" in found["failed"]
    assert goals({"peers": found}) == []
