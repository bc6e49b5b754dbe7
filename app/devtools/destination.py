"""The test destination: a small real HTTP service that receives publications.

It is deliberately a destination that does **not** deduplicate: every ``POST
/publications`` it applies is one more application in its durable record (SQLite,
``synchronous=FULL``), whatever its ``Idempotency-Key``. So a client that repeats an
uncertain request blindly publishes twice, and a test reading ``GET /control/stats``
sees it. What it offers a careful client is a lookup by operation id: ``GET
/publications/{key}`` answers 200 (applied, with the publication) or 404.

How each ``POST /publications`` behaves is scripted over HTTP (``POST /control``): the
next calls take their mode from ``script`` in order, then ``default``:

* ``ok`` -- apply, answer 201; ``async`` -- apply, answer 202 (confirmed later);
* ``apply_then_hang`` -- apply, then hold the answer ``hang_seconds`` (the client times out);
* ``apply_then_reset`` -- apply, then reset the connection (TCP RST, no answer);
* ``apply_then_down`` -- apply, reset, and go down: every publication request is reset
  until ``{"down": false}``;
* ``fail_503`` -- answer 503 without applying; ``refuse`` -- answer 422 without applying.

``delay_seconds`` holds every publication request that long before it acts (so
concurrency is observable: ``max_in_flight`` counts requests being handled at once).
Served with ``h11`` on asyncio streams: a reset needs the socket, which ASGI hides.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h11

MODES = frozenset(
    {"ok", "async", "apply_then_hang", "apply_then_reset", "apply_then_down", "fail_503", "refuse"}
)
MAX_BODY = 1024 * 1024


class _Reset(Exception):  # noqa: N818 - a control-flow signal
    """Reset the connection instead of answering."""


@dataclass
class Destination:
    db_path: Path
    script: list[str] = field(default_factory=list)
    default: str = "ok"
    hang_seconds: float = 30.0
    delay_seconds: float = 0.0
    down: bool = False
    posts: int = 0
    lookups: int = 0
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self.db = sqlite3.connect(self.db_path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS applications ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT, operation_id TEXT NOT NULL,"
            " title TEXT NOT NULL, applied_at TEXT DEFAULT CURRENT_TIMESTAMP)"
        )

    # -- the record ------------------------------------------------------------------

    def apply(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        cursor = self.db.execute(
            "INSERT INTO applications (operation_id, title) VALUES (?, ?)",
            (key, str(body.get("title", ""))[:200]),
        )
        return {"operation_id": key, "publication_id": f"pub-{cursor.lastrowid}"}

    def find(self, key: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT seq FROM applications WHERE operation_id = ? ORDER BY seq LIMIT 1", (key,)
        ).fetchone()
        return None if row is None else {"operation_id": key, "publication_id": f"pub-{row[0]}"}

    def stats(self) -> dict[str, Any]:
        counts = dict(
            self.db.execute(
                "SELECT operation_id, count(*) FROM applications GROUP BY operation_id"
            ).fetchall()
        )
        return {
            "applications": counts,
            "posts": self.posts,
            "lookups": self.lookups,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "down": self.down,
            "script": list(self.script),
        }

    def control(self, body: dict[str, Any]) -> None:
        script = [str(m) for m in body.get("script", self.script)]
        default = str(body.get("default", self.default))
        unknown = {*script, default} - MODES
        if unknown:
            raise ValueError(f"unknown modes: {sorted(unknown)}")
        self.script, self.default = script, default
        self.hang_seconds = float(body.get("hang_seconds", self.hang_seconds))
        self.delay_seconds = float(body.get("delay_seconds", self.delay_seconds))
        self.down = bool(body.get("down", self.down))
        if body.get("reset_counters"):
            self.posts = self.lookups = self.max_in_flight = 0

    # -- requests --------------------------------------------------------------------

    async def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if path == "/health":
            return 200, {"status": "ok"}
        if path == "/control/stats" and method == "GET":
            return 200, self.stats()
        if path == "/control" and method == "POST":
            try:
                self.control(json.loads(body or b"{}"))
            except (ValueError, TypeError) as exc:
                return 422, {"error": str(exc)}
            return 200, self.stats()
        if path.startswith("/publications"):
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                return await self._publications(method, path, headers, body)
            finally:
                self.in_flight -= 1
        return 404, {"error": "not found"}

    async def _publications(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        if self.down:
            raise _Reset
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        if method == "GET" and path.count("/") == 2:
            self.lookups += 1
            found = self.find(path.rsplit("/", 1)[1])
            return (404, {"error": "not applied"}) if found is None else (200, found)
        if method != "POST" or path != "/publications":
            return 405, {"error": "method not allowed"}
        key = headers.get("idempotency-key")
        if not key:
            return 400, {"error": "Idempotency-Key is required"}
        self.posts += 1
        mode = self.script.pop(0) if self.script else self.default
        if mode == "fail_503":
            return 503, {"error": "unavailable"}
        if mode == "refuse":
            return 422, {"error": "refused"}
        try:
            document = json.loads(body)
        except ValueError:
            return 400, {"error": "bad JSON"}
        applied = self.apply(key, document if isinstance(document, dict) else {})
        if mode == "apply_then_reset":
            raise _Reset
        if mode == "apply_then_down":
            self.down = True
            raise _Reset
        if mode == "apply_then_hang":
            await asyncio.sleep(self.hang_seconds)
        return (202 if mode == "async" else 201), applied

    # -- the server ------------------------------------------------------------------

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _read_request(conn, reader)
                if request is None:
                    return
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                try:
                    status, answer = await self.handle(
                        request.method.decode(), request.target.decode(), headers, body
                    )
                except _Reset:
                    _reset(writer)
                    return
                payload = json.dumps(answer).encode()
                writer.write(
                    conn.send(
                        h11.Response(
                            status_code=status,
                            headers=[
                                ("content-type", "application/json"),
                                ("content-length", str(len(payload))),
                            ],
                        )
                    )
                    or b""
                )
                writer.write(conn.send(h11.Data(data=payload)) or b"")
                writer.write(conn.send(h11.EndOfMessage()) or b"")
                await writer.drain()
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (h11.RemoteProtocolError, ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader
) -> tuple[h11.Request | None, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            conn.receive_data(data)
            if not data and request is None:
                return None, b""
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise h11.RemoteProtocolError("body too large")
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (linger 0): the client sees a reset, not an answer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def serve(host: str, port: int, db_path: Path) -> None:
    destination = Destination(db_path)
    server = await asyncio.start_server(destination.connection, host, port)
    async with server:
        await server.serve_forever()
