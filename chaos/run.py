"""``make chaos`` (``CHAOS=short`` for the short configuration): run the scenarios
against real processes and print one table; exit 1 when any row fails.

    python -m chaos.run --config short --only listener,duplicates

Each run gets a throwaway data directory under /tmp with its own embedded PostgreSQL
(never the test suite's server); every process it starts is stopped at the end, also
when a scenario fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from chaos.cluster import Cluster, Server
from chaos.scenarios import CONFIGS, SCENARIOS, Config, Row

COLUMNS = ("scenario", "accepted", "lost", "published twice", "max rescue", "5xx", "verdict")


async def run_one(server: Server, work: Path, key: str, config: Config) -> Row:
    title, scenario, timing = SCENARIOS[key]
    row = Row(title)
    cluster = Cluster(server, key, timing, work)
    started = time.monotonic()
    try:
        await cluster.create()
        await scenario(cluster, config, row)
    except Exception as exc:
        row.check(f"ran to the end ({type(exc).__name__}: {exc})", False)
        traceback.print_exc()
    finally:
        await asyncio.to_thread(cluster.close)
    row.notes.append(f"{time.monotonic() - started:.0f} s")
    verdict = "PASS" if row.passed else "FAIL"
    print(f"[chaos] {key}: {verdict} ({row.notes[-1]})", file=sys.stderr, flush=True)
    if not row.passed:
        print(f"[chaos] logs of {key} kept in {cluster.work_dir}", file=sys.stderr)
    return row


def table(rows: list[Row]) -> str:
    cells = [
        (
            r.scenario,
            str(r.figures.accepted),
            str(r.figures.lost),
            str(r.figures.published_twice),
            "-"
            if r.figures.max_rescue_seconds is None
            else f"{r.figures.max_rescue_seconds:.2f} s",
            str(r.figures.bad_5xx),
            "PASS" if r.passed else "FAIL",
        )
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [COLUMNS, *cells]) for i in range(len(COLUMNS))]
    line = "| " + " | ".join(f"{{:{w}}}" for w in widths) + " |"
    out = [line.format(*COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line.format(*c) for c in cells]
    out.append("")
    for r in rows:
        out.append(f"{r.scenario}: {'; '.join(r.notes)}")
        out += [f"    {'ok  ' if ok else 'FAIL'} {what}" for what, ok in r.checks]
    return "\n".join(out)


async def main_async(config: Config, only: list[str], keep: bool, json_out: Path | None) -> int:
    root = Path(tempfile.mkdtemp(prefix="atlas-chaos-"))
    print(f"[chaos] {config.name} run in {root}: {', '.join(only)}", file=sys.stderr)
    rows: list[Row] = []
    server: Server | None = None
    try:
        server = await asyncio.to_thread(Server, root / "db")
        for key in only:
            rows.append(await run_one(server, root / "runs", key, config))
    finally:
        if server is not None:
            await asyncio.to_thread(server.close)
        failed = not rows or not all(r.passed for r in rows)
        if not keep and not failed:
            shutil.rmtree(root, ignore_errors=True)
    print(table(rows))
    if json_out is not None:
        await asyncio.to_thread(
            json_out.write_text,
            json.dumps(
                [
                    {
                        "scenario": r.scenario,
                        "accepted": r.figures.accepted,
                        "lost": r.figures.lost,
                        "published_twice": r.figures.published_twice,
                        "max_rescue_seconds": r.figures.max_rescue_seconds,
                        "bad_5xx": r.figures.bad_5xx,
                        "passed": r.passed,
                        "checks": r.checks,
                        "notes": r.notes,
                    }
                    for r in rows
                ],
                indent=2,
            ),
        )
    return 0 if rows and all(r.passed for r in rows) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", choices=sorted(CONFIGS), default="full")
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated: {','.join(SCENARIOS)}"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dir and logs")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenarios: {unknown}")
    sys.exit(asyncio.run(main_async(CONFIGS[args.config], only, args.keep, args.json)))


if __name__ == "__main__":
    main()
