"""CPU time per request of the API process, atlas beside the bare endpoint -- the steadier
figure on a shared box, where throughput moves with everyone else's load.

For each scenario and each side (``atlas-jobs api``, :mod:`benchmarks.bare_app`), the load
generator first warms up (its own run, not counted), then sends ``--requests`` requests at
``--concurrency`` keep-alive connections while the server's ``utime + stime``
(``/proc/<pid>/stat``) is read before and after: the difference divided by the requests
is the server's CPU per request, also split into user and system time, beside the minor
page faults per request (a steadier count than any time). Both servers run on one
throwaway database of the embedded PostgreSQL (or ``DATABASE_URL``'s server), as in
``make bench``'s http section.

``--atlas-repo DIR`` serves the API from another checkout (a git worktree of a base commit,
say) with this one's virtualenv, to compare before and after in one run; ``--rounds N``
alternates the sides N times; ``--profile DIR`` records a py-spy flame graph
(``api-<scenario>.svg``) of the atlas process during its measured run of each scenario.

    python -m benchmarks.cpu_per_request --requests 1000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx

from atlas_jobs._app.db.engine import normalize_url, resolve_database_url
from atlas_jobs._app.settings import Settings
from benchmarks.peer_adapter import migrate, reset_database
from benchmarks.suite import (
    NOOP_BODY,
    REPO,
    api_environment,
    bench_key,
    drop_database,
    free_port,
    load,
    server_process,
    with_database,
)

SCENARIOS = ("create", "create_key", "status_200", "status_304")
_TICKS = os.sysconf("SC_CLK_TCK")


def counters(pid: int) -> tuple[int, float, float]:
    """(minor page faults, utime, stime in seconds) of the process. Minor faults per
    request hardly move with the machine's load: memory mapped and touched per request
    (a greenlet's frame stack, say) shows there, unlike in a noisy CPU time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


def specs(
    scenario: str, side: str, port: int, auth: dict[str, str], target: tuple[str, str]
) -> dict[str, Any]:
    path, etag = target
    base: dict[str, Any] = {"port": port, "headers": dict(auth) if side == "atlas" else {}}
    create_path = "/v1/jobs" if side == "atlas" else "/bare/jobs"
    if scenario in ("create", "create_key"):
        base |= {"method": "POST", "paths": [create_path], "body": NOOP_BODY, "expect": 202}
        if scenario == "create_key":
            base["idempotency_keys"] = uuid.uuid4().hex
        return base
    base |= {"method": "GET", "paths": [path], "expect": 200}
    if scenario == "status_304":
        base["headers"]["If-None-Match"] = etag
        base["expect"] = 304
    return base


@contextmanager
def py_spy(pid: int, svg: Path) -> Iterator[None]:
    recorder = subprocess.Popen(  # noqa: S603 - a dev tool of this venv
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-p",
            str(pid),
            "-o",
            str(svg),
            "--rate",
            "250",
            *([] if os.environ.get("PYSPY_NONATIVE") else ["--native"]),
            "--format",
            "raw" if svg.suffix == ".txt" else "flamegraph",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        recorder.send_signal(2)
        recorder.wait(timeout=60)


def measure(
    args: argparse.Namespace, pids: dict[str, int], ports: dict[str, int], key: str
) -> list[dict[str, Any]]:
    auth = {"Authorization": f"Bearer {key}"}
    a = httpx.post(f"http://127.0.0.1:{ports['atlas']}/v1/jobs", json=NOOP_BODY, headers=auth)
    b = httpx.post(f"http://127.0.0.1:{ports['bare']}/bare/jobs", json=NOOP_BODY)
    a.raise_for_status()
    b.raise_for_status()
    targets = {
        "atlas": (f"/v1/jobs/{a.json()['id']}", a.headers["ETag"]),
        "bare": (f"/bare/jobs/{b.json()['id']}", b.headers["ETag"]),
    }
    rows: list[dict[str, Any]] = []
    for round_no in range(args.rounds):
        for scenario in args.scenarios:
            for side in ("atlas", "bare"):
                spec = specs(scenario, side, ports[side], auth, targets[side])
                warm = {
                    **spec,
                    "requests": args.warmup,
                    "warmup": 0,
                    "concurrency": args.concurrency,
                }
                load(warm)
                measured = {**spec, "requests": args.requests, "warmup": 0}
                measured["concurrency"] = args.concurrency
                if "idempotency_keys" in spec:
                    measured["idempotency_keys"] = uuid.uuid4().hex
                loadavg = os.getloadavg()[0]
                with ExitStack() as stack:
                    if args.profile and round_no == 0 and (side == "atlas" or args.profile_bare):
                        name = f"api-{scenario}" if side == "atlas" else f"bare-{scenario}"
                        svg = args.profile / f"{name}.{args.profile_format}"
                        stack.enter_context(py_spy(pids[side], svg))
                    faults0, user0, system0 = counters(pids[side])
                    result = load(measured)
                    faults1, user1, system1 = counters(pids[side])
                before, after = user0 + system0, user1 + system1
                row = {
                    "round": round_no,
                    "scenario": scenario,
                    "side": side,
                    "cpu_ms_per_request": round((after - before) * 1000 / args.requests, 3),
                    "user_ms_per_request": round((user1 - user0) * 1000 / args.requests, 3),
                    "sys_ms_per_request": round((system1 - system0) * 1000 / args.requests, 3),
                    "minor_faults_per_request": round((faults1 - faults0) / args.requests, 2),
                    "rps": result["rps"],
                    "p50_ms": result["p50_ms"],
                    "load": round(loadavg, 2),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    return rows


async def prepare(url: str) -> str:
    """A fresh, migrated database and an API key of the owner ``bench``."""
    await reset_database(url)
    await asyncio.to_thread(migrate, url)
    return await bench_key(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scenarios", type=lambda s: s.split(","), default=list(SCENARIOS))
    parser.add_argument("--atlas-repo", type=Path, default=REPO)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--profile-format", choices=("svg", "txt"), default="svg")
    parser.add_argument("--profile-bare", action="store_true")
    args = parser.parse_args()
    explicit = os.environ.get("DATABASE_URL")
    base_url = normalize_url(explicit) if explicit else resolve_database_url(Settings())
    run_id = uuid.uuid4().hex[:8]
    url = with_database(base_url, f"atlas_bench_cpu_{run_id}")
    key = asyncio.run(prepare(url))
    try:
        with tempfile.TemporaryDirectory(prefix="atlas-bench-cpu-") as tmp:
            env = api_environment(url, tmp)
            ports = {"atlas": free_port(), "bare": free_port()}
            with (
                server_process(
                    ["-m", "atlas_jobs._app.cli", "api", "--port", str(ports["atlas"])],
                    env={**env, "PYTHONPATH": str(args.atlas_repo)},
                    log_path=Path(tmp) / "atlas-api.log",
                    port=ports["atlas"],
                    cwd=args.atlas_repo,
                ) as atlas,
                server_process(
                    ["-m", "benchmarks.bare_app", "--port", str(ports["bare"])],
                    env={**env, "PYTHONPATH": str(REPO)},
                    log_path=Path(tmp) / "bare-api.log",
                    port=ports["bare"],
                ) as bare,
            ):
                if args.profile:
                    args.profile.mkdir(parents=True, exist_ok=True)
                rows = measure(args, {"atlas": atlas.pid, "bare": bare.pid}, ports, key)
    finally:
        asyncio.run(drop_database(url))
    print(
        "\nscenario     side   cpu ms/request (each round)        req/s (each round)"
        "        minor faults/request"
    )
    for scenario in args.scenarios:
        for side in ("atlas", "bare"):
            mine = [r for r in rows if r["scenario"] == scenario and r["side"] == side]
            cpu = " / ".join(f"{r['cpu_ms_per_request']:.2f}" for r in mine)
            rps = " / ".join(f"{r['rps']:.0f}" for r in mine)
            faults = " / ".join(f"{r['minor_faults_per_request']:.1f}" for r in mine)
            print(f"{scenario:<12} {side:<6} {cpu:<34} {rps:<24} {faults}")


if __name__ == "__main__":
    main()
