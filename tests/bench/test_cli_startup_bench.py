"""``make bench``'s CLI start-up section runs and reports every command beside a bare
interpreter (not a timing test: the figures are the benchmark's to report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.cli_startup import import_total_seconds
from tests.support import REPO


def test_import_totals_sum_the_top_level_imports_only() -> None:
    stderr = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |   encodings.utf_8",
            "import time:       200 |       1200 | encodings",
            "import time:       300 |       2500 | site",
            "unrelated line",
        ]
    )
    assert import_total_seconds(stderr) == 0.0037


def test_the_benchmark_prints_each_command_beside_a_bare_python(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.cli_startup"],
        cwd=REPO,
        env={**os.environ, "BENCH_CLI_RUNS": "1", "BENCH_RESULTS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names = [line[:22].strip() for line in done.stdout.splitlines()]
    assert {"python -c pass", "atlas-jobs --help", "atlas-jobs status ID"} <= set(names)
    (written,) = tmp_path.glob("cli-startup-*.json")
    commands = json.loads(written.read_text())["commands"]
    assert set(commands) == {"python -c pass", "atlas-jobs --help", "atlas-jobs status ID"}
    for row in commands.values():
        assert row["imports_median_s"] > 0
    assert commands["python -c pass"]["ratio_to_bare"] == 1.0
