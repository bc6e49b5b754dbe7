"""A steady client in a process of its own (chaos scenarios 6 and 10).

What these scenarios claim is the *API's* latency for a well-behaved client while others
misbehave. A steady client sharing the chaos runner's event loop measured that loop
instead: the runner also drives thousands of watcher and idle sockets, and one run showed
a 19 s gap between two of the steady client's requests during which the API received
nothing from it (its log has both requests, each served in under 2 s). So the steady
client runs here, on its own loop and keep-alive connection::

    python -m chaos.steady --url URL --key KEY --pattern create-read|read-mostly

until SIGTERM, then prints one JSON object (latencies, statuses, accepted ids) on stdout.

- ``create-read``: create a job (``atlas.bundle``) and read it, one sample per pair,
  every 0.1-0.2 s;
- ``read-mostly``: read one ``atlas.noop`` job every 50 ms, creating another every tenth
  call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.cluster import Tally, bundle_body, client, noop_body, post_job

PATTERNS = ("create-read", "read-mostly")


@dataclass
class SteadyResult:
    """What the steady client saw."""

    tally: Tally = field(default_factory=Tally)
    latencies: list[float] = field(default_factory=list)
    accepted: list[str] = field(default_factory=list)

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[max(0, int(len(ordered) * 0.99) - 1)] if ordered else float("inf")

    def as_json(self) -> dict[str, Any]:
        return {
            "latencies": self.latencies,
            "accepted": self.accepted,
            "statuses": dict(self.tally.statuses),
            "errors": dict(self.tally.errors),
            "bad_5xx": self.tally.bad_5xx,
            "shed": self.tally.shed,
            "shed_without_retry_after": self.tally.shed_without_retry_after,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SteadyResult:
        tally = Tally()
        tally.statuses.update({int(k): v for k, v in data["statuses"].items()})
        tally.errors.update(data["errors"])
        tally.bad_5xx = data["bad_5xx"]
        tally.shed = data["shed"]
        tally.shed_without_retry_after = data["shed_without_retry_after"]
        return cls(tally, list(data["latencies"]), list(data["accepted"]))


async def run(url: str, key: str, pattern: str, stop: asyncio.Event) -> SteadyResult:
    result = SteadyResult()
    tally = result.tally
    async with client(url, key, timeout=10, connections=1) as http:
        job: str | None = None
        for n in range(1_000_000):
            if stop.is_set():
                break
            started = time.monotonic()
            try:
                if pattern == "create-read":
                    made = await post_job(http, bundle_body(), tally)
                    if made:
                        result.accepted.append(made)
                        tally.record(await http.get(f"/v1/jobs/{made}"))
                elif job is None or n % 10 == 0:
                    made = await post_job(http, noop_body(f"steady-{n}"), tally)
                    if made:
                        result.accepted.append(made)
                        job = job or made
                else:
                    tally.record(await http.get(f"/v1/jobs/{job}"))
            except Exception as exc:  # every failure is a figure
                tally.error(exc)
            result.latencies.append(time.monotonic() - started)
            pause = (0.1 if n % 2 else 0.2) if pattern == "create-read" else 0.05
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=pause)
    return result


class SteadyClient:
    """The parent's handle on a running ``python -m chaos.steady``."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def stop(self) -> SteadyResult:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(self.process.communicate(), timeout=60)
        return SteadyResult.from_json(json.loads(out))


@asynccontextmanager
async def steady_client(url: str, key: str, pattern: str, log: Path) -> AsyncIterator[SteadyClient]:
    """Start the steady client; always stopped (killed if need be) on the way out."""
    with log.open("wb") as err:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "chaos.steady",
            "--url",
            url,
            "--key",
            key,
            "--pattern",
            pattern,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    try:
        yield SteadyClient(process)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--pattern", choices=PATTERNS, required=True)
    args = parser.parse_args()

    async def go() -> SteadyResult:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        return await run(args.url, args.key, args.pattern, stop)

    print(json.dumps(asyncio.run(go()).as_json()))


if __name__ == "__main__":
    main()
