"""How long the console command spends importing before it does anything (part of
``make bench``; ``python -m benchmarks.cli_startup`` alone).

Each command runs ``BENCH_CLI_RUNS`` times under ``python -X importtime``; the import
total of a run is the sum of the cumulative times of its top-level imports (what
``-X importtime`` prints at depth 0). Beside them a bare ``python -c pass`` runs the same
number of times, so the table shows what the interpreter's own start costs on this box in
the same minutes. ``status`` is asked about a job at an address nothing listens on: it
imports all it needs to read a job, then fails to connect (exit code 3), so no server is
needed.

Prints one row per command (median and best import total, median wall time, and the
ratio of the median import total to the bare interpreter's) and writes
``BENCH_RESULTS_DIR/cli-startup-<run>.json``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

# A job id in the right form; nothing is asked of a server.
SOME_JOB = "0190a5c4-6f0e-7a3b-9c1d-2e3f4a5b6c7d"
_TOP_LEVEL = re.compile(r"^import time:\s+\d+ \|\s+(\d+) \| (\S.*)$")


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    argv: tuple[str, ...]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def commands() -> list[Command]:
    cli = (sys.executable, "-X", "importtime", "-m", "atlas_jobs._app.cli")
    return [
        Command("python -c pass", (sys.executable, "-X", "importtime", "-c", "pass")),
        Command("atlas-jobs --help", (*cli, "--help")),
        Command("atlas-jobs status ID", (*cli, "status", SOME_JOB)),
    ]


def import_total_seconds(stderr: str) -> float:
    """The sum of the cumulative times of the depth-0 imports of one run, in seconds."""
    micros = sum(int(m.group(1)) for line in stderr.splitlines() if (m := _TOP_LEVEL.match(line)))
    return micros / 1e6


def measure(command: Command, runs: int, env: dict[str, str]) -> dict[str, float]:
    totals: list[float] = []
    walls: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(  # noqa: S603 - our own interpreter and module
            command.argv, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        walls.append(time.perf_counter() - started)
        totals.append(import_total_seconds(done.stderr))
    return {
        "imports_median_s": statistics.median(totals),
        "imports_best_s": min(totals),
        "wall_median_s": statistics.median(walls),
    }


def main() -> None:
    runs = int(os.environ.get("BENCH_CLI_RUNS", "7"))
    env = {
        **os.environ,
        "ATLAS_URL": f"http://127.0.0.1:{_closed_port()}",
        "ATLAS_API_KEY": "atlas_bench_not_a_key",
        "COLUMNS": "80",
    }
    env.pop("ATLAS_DEBUG", None)
    rows = {command.name: measure(command, runs, env) for command in commands()}
    bare = rows["python -c pass"]["imports_median_s"] or 1e-9
    print(f"\nCLI start-up ({runs} runs each; load average {os.getloadavg()[0]:.1f})")
    print(f"{'command':<22} {'imports p50':>12} {'best':>8} {'wall p50':>9} {'x bare':>7}")
    for name, row in rows.items():
        row["ratio_to_bare"] = row["imports_median_s"] / bare
        print(
            f"{name:<22} {row['imports_median_s']:>11.3f}s {row['imports_best_s']:>7.3f}s "
            f"{row['wall_median_s']:>8.3f}s {row['ratio_to_bare']:>7.1f}"
        )
    run_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results = Path(os.environ.get("BENCH_RESULTS_DIR", "benchmarks/results"))
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"cli-startup-{run_id}.json"
    document = {"run": run_id, "runs": runs, "load_average": os.getloadavg(), "commands": rows}
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
