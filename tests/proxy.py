"""A TCP proxy the test controls, between a client and a live API: pass traffic, be
*down* (the port refuses connections and open ones are cut), or *lose answers* (the
request reaches the API, the answer never reaches the client).

It runs its own event loop on a daemon thread, so sync code, subprocesses and async
tests can all use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from tests.support import free_port


class TcpProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = free_port()
        self.target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._lose = 0
        self.connections = 0
        self.sent: list[bytes] = []
        """Every chunk a client sent through the proxy, in order (requests, headers)."""
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.up()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _call(self, coro: object) -> None:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        future.result(timeout=30)

    def up(self) -> None:
        """Accept and forward connections (again)."""
        self._call(self._listen())

    def down(self) -> None:
        """Refuse new connections and cut the open ones: the API looks unreachable."""
        self._call(self._close())

    def lose_answers(self, count: int) -> None:
        """The next ``count`` connections deliver the request but drop the answer."""
        self._lose = count

    def close(self) -> None:
        self.down()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._handle, self.host, self.port, reuse_address=True
            )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()
        self._open.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        lose = self._lose > 0
        if lose:
            self._lose -= 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._open.update({writer, up_writer})

        async def pipe(
            src: asyncio.StreamReader,
            dst: asyncio.StreamWriter,
            *,
            drop: bool,
            record: bool = False,
        ) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    if drop:
                        break  # the answer arrived; the client never sees it
                    if record:
                        self.sent.append(data)
                    dst.write(data)
                    await dst.drain()
            if drop:
                dst.transport.abort()
            else:
                dst.close()

        try:
            await asyncio.gather(
                pipe(reader, up_writer, drop=False, record=True), pipe(up_reader, writer, drop=lose)
            )
        finally:
            for side in (writer, up_writer):
                self._open.discard(side)
                side.transport.abort()


@contextlib.contextmanager
def tcp_proxy(target_port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_port)
    try:
        yield proxy
    finally:
        proxy.close()
