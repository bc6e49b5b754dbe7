"""HTTP load generator for ``make bench``, run as its own process (never inside the
server's): a fixed number of requests over a fixed number of keep-alive HTTP/1.1
connections, each connection sending its next request as soon as the answer arrived.

It speaks raw HTTP/1.1 over asyncio streams rather than through httpx: the client's own
CPU cost per request (a few microseconds here, several hundred with httpx) then barely
counts on a 2-core box where client, server and PostgreSQL share the cores.

Input: one JSON object as the only argument::

    {"host": "127.0.0.1", "port": 8001, "method": "POST", "paths": ["/v1/jobs"],
     "headers": {"Authorization": "Bearer ..."}, "body": {...} | null,
     "idempotency_keys": "prefix" | null, "requests": 3000, "warmup": 300,
     "concurrency": 16, "expect": 202}

``paths`` are used round-robin; ``idempotency_keys`` adds ``Idempotency-Key:
<prefix>-<n>``, unique per request (warm-up included). Output: ONE JSON line on stdout
with ``requests``, ``seconds``, ``rps``, ``p50_ms``, ``p99_ms``, ``max_ms``,
``statuses`` (answer counts of the measured requests) and ``unexpected`` (measured
answers whose status was not ``expect``).
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (pct in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(pct / 100.0 * len(ordered)) - 1))
    return ordered[k]


class Spec:
    def __init__(self, raw: dict[str, Any]) -> None:
        self.host: str = raw.get("host", "127.0.0.1")
        self.port: int = int(raw["port"])
        self.method: str = raw["method"]
        self.paths: list[str] = list(raw["paths"])
        self.headers: dict[str, str] = dict(raw.get("headers") or {})
        body = raw.get("body")
        self.body: bytes = b"" if body is None else json.dumps(body).encode()
        self.keys: str | None = raw.get("idempotency_keys")
        self.requests: int = int(raw["requests"])
        self.warmup: int = int(raw.get("warmup", 0))
        self.concurrency: int = int(raw["concurrency"])
        self.expect: int = int(raw["expect"])

    def request(self, n: int) -> bytes:
        lines = [
            f"{self.method} {self.paths[n % len(self.paths)]} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            *(f"{name}: {value}" for name, value in self.headers.items()),
        ]
        if self.keys is not None:
            lines.append(f"Idempotency-Key: {self.keys}-{n}")
        if self.body or self.method in {"POST", "PUT", "PATCH"}:
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Read one response; return its status and whether the server keeps the connection."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed by the server")
    status = int(status_line.split(b" ", 2)[1])
    length = 0
    chunked = False
    keep = True
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        lowered = name.strip().lower()
        if lowered == b"content-length":
            length = int(value.strip())
        elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif lowered == b"connection" and b"close" in value.lower():
            keep = False
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip(), 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length and status != 304:
        await reader.readexactly(length)
    return status, keep


class Run:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.next = 0
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()

    async def connection(self, end: int, record: bool) -> None:
        spec = self.spec
        reader, writer = await asyncio.open_connection(spec.host, spec.port)
        try:
            while self.next < end:
                n = self.next
                self.next += 1
                t0 = time.perf_counter()
                writer.write(spec.request(n))
                status, keep = await read_answer(reader)
                if record:
                    self.latencies.append((time.perf_counter() - t0) * 1000.0)
                    self.statuses[status] += 1
                if not keep:
                    writer.close()
                    reader, writer = await asyncio.open_connection(spec.host, spec.port)
        finally:
            writer.close()

    async def phase(self, count: int, record: bool) -> float:
        end = self.next + count
        t0 = time.perf_counter()
        await asyncio.gather(
            *(self.connection(end, record) for _ in range(max(1, self.spec.concurrency)))
        )
        return time.perf_counter() - t0


async def run(spec: Spec) -> dict[str, Any]:
    load = Run(spec)
    if spec.warmup:
        await load.phase(spec.warmup, record=False)
    seconds = await load.phase(spec.requests, record=True)

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "requests": len(load.latencies),
        "concurrency": spec.concurrency,
        "seconds": round(seconds, 4),
        "rps": round(len(load.latencies) / seconds, 1) if seconds > 0 else None,
        "p50_ms": rounded(percentile(load.latencies, 50)),
        "p99_ms": rounded(percentile(load.latencies, 99)),
        "max_ms": rounded(max(load.latencies)) if load.latencies else None,
        "statuses": {str(code): n for code, n in sorted(load.statuses.items())},
        "unexpected": sum(n for code, n in load.statuses.items() if code != spec.expect),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        raise SystemExit("usage: python -m benchmarks.loadgen '<json spec>'")
    result = asyncio.run(run(Spec(json.loads(args[0]))))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
