"""The short chaos configuration in the suite: the cheaper scenarios of
``make chaos CHAOS=short`` -- PostgreSQL stopped with ``-m immediate`` under load, a
network proxy resetting, stalling and losing commit acknowledgements, workers under
libfaketime, the LISTEN connection killed, an idle transaction held, duplicate
delivery -- against real processes on the runner's own throwaway embedded PostgreSQL;
every row of its table must pass. (Scenario 11 runs in the suite as
``test_api_state_machine.py``; 2, 6, 8 and 10 only in ``make chaos``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

SCENARIOS = "pg-stop,network,skew,listener,idle-tx,duplicates"


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_short_chaos_scenarios_pass(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos.run",
            "--config",
            "short",
            "--only",
            SCENARIOS,
            "--json",
            str(rows_file),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=460,
        check=False,
    )
    report = done.stdout + "\n" + done.stderr[-6000:]
    assert done.returncode == 0, report
    rows = json.loads(rows_file.read_text())
    assert [r["passed"] for r in rows] == [True] * len(SCENARIOS.split(",")), report
    assert all(r["lost"] == 0 and r["published_twice"] == 0 and r["bad_5xx"] == 0 for r in rows)
