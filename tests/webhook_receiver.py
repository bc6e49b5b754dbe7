"""A real HTTP receiver for webhook tests: records every request; can apply-then-drop
(record the delivery, then close the connection without answering: the sender's
response is lost although the receiver has it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    drop_first_of_each: bool = False
    status: int = 200
    received: list[Received] = field(default_factory=list)
    server: asyncio.Server | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/atlas"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None

    def ids(self) -> list[str]:
        return [r.headers["webhook-id"] for r in self.received]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines[1:] if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            first = headers.get("webhook-id") not in self.ids()
            self.received.append(Received(headers, body))
            if self.drop_first_of_each and first:
                writer.transport.abort()  # applied, but the answer never leaves
                return
            answer = f"HTTP/1.1 {self.status} X\r\nContent-Length: 0\r\nConnection: close\r\n"
            writer.write(answer.encode() + b"\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
