"""A small asyncio TCP proxy between Atlas processes and PostgreSQL, under a scenario's
control (chaos scenario 3; the feed tests use it to take the database away from an API).

Client bytes are forwarded as they arrive; the proxy also *reads* them as PostgreSQL
frontend messages (startup, then ``type + int32 length + body``) so that it can act at
protocol points, never at byte offsets:

- :meth:`TcpProxy.drop_all` aborts every open connection (a reset in mid-transaction);
- :attr:`TcpProxy.refusing` aborts every new connection at its start-up message (the
  database "is gone"); connections whose start-up names :attr:`TcpProxy.spare` (an
  application name) are let through and never dropped;
- :meth:`TcpProxy.stall` stops forwarding in both directions on the open connections for
  a while (a network that hangs, not one that fails), then lets them continue;
- :attr:`TcpProxy.drop_commit_ack` (a probability) forwards a ``COMMIT`` to the server
  and then cuts the connection *before* the server's answer reaches the client: the
  transaction committed, the client never learns it. A commit whose transaction bound a
  statement containing :attr:`TcpProxy.watch_marker` (the publication) has its own
  probability, :attr:`TcpProxy.drop_marked_commit_ack`, and is counted apart. A marked
  statement run outside ``BEGIN``/``COMMIT`` (autocommit: the statement is its own
  transaction, committed at its ``Sync``) is a commit point too: its ``Sync`` is
  forwarded and the answer lost the same way. With
  :attr:`TcpProxy.always_drop_first_marked` the first marked commit always loses its
  answer, so a scenario that needs the fault does not depend on chance.
- :attr:`TcpProxy.reset_on_marker` (a count) resets the connection instead of forwarding
  the next marked statements: the transaction is cut before the marked statement reaches
  the server, so it rolls back (the client sees its connection lost mid-transaction).

Nothing here knows about Atlas; the scenario reads every outcome back from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
from dataclasses import dataclass, field

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


@dataclass
class ProxyCounters:
    connections: int = 0
    refused: int = 0
    dropped: int = 0  # connections aborted by drop_all
    commits: int = 0
    marked_commits: int = 0  # commits of a transaction that ran the marker
    commit_acks_dropped: int = 0
    marked_commit_acks_dropped: int = 0  # of those: a transaction with the marker
    autocommit_marked_commits: int = 0  # marked statements committed at their Sync
    marker_resets: int = 0  # connections reset instead of running a marked statement
    stalls: int = 0


@dataclass(eq=False)  # hashed by identity: held in a set
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    statements: dict[bytes, bytes] = field(default_factory=dict)  # prepared name -> SQL
    marked: bool = False  # this transaction ran a statement with the marker
    in_block: bool = False  # between a BEGIN and its COMMIT/ROLLBACK
    spared: bool = False  # its start-up message named the proxy's ``spare``

    def abort(self) -> None:
        for writer in (self.client, self.server):
            transport = writer.transport
            if not transport.is_closing():
                transport.abort()


class TcpProxy:
    """Listen on 127.0.0.1:``port`` (a free one), forward to ``target``."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        drop_commit_ack: float = 0.0,
        drop_marked_commit_ack: float = 0.0,
        watch_marker: bytes = b"",
        always_drop_first_marked: bool = False,
        seed: int = 3,
    ) -> None:
        self.target = (target_host, target_port)
        self.drop_commit_ack = drop_commit_ack
        self.drop_marked_commit_ack = drop_marked_commit_ack
        self.watch_marker = watch_marker
        self.always_drop_first_marked = always_drop_first_marked
        self.reset_on_marker = 0
        self.refusing = False
        self.spare = b""  # connections whose start-up message holds this are never cut
        self.counters = ProxyCounters()
        self.port = 0
        self._rng = random.Random(seed)  # noqa: S311 - chaos, not cryptography # nosec B311
        self._links: set[_Link] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        self._flowing.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    @property
    def open_connections(self) -> int:
        return len(self._links)

    def drop_all(self) -> int:
        """Abort every open connection (RST to both sides) but the spared ones; how many."""
        links = [link for link in self._links if not link.spared]
        for link in links:
            link.abort()
        self.counters.dropped += len(links)
        return len(links)

    async def stall(self, seconds: float) -> None:
        """Hold every byte in both directions for ``seconds``, then let them through."""
        self.counters.stalls += 1
        self._flowing.clear()
        try:
            await asyncio.sleep(seconds)
        finally:
            self._flowing.set()

    # -- plumbing ---------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        down = asyncio.create_task(self._pipe(up_reader, writer, link))
        self._tasks.add(down)
        try:
            if await self._client_to_server(reader, up_writer, link) == "cut":
                # The server answers the COMMIT (to nobody), then sees our end of stream.
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(down), timeout=30)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.abort()
            self._links.discard(link)
            down.cancel()
            with contextlib.suppress(BaseException):
                await down
            self._tasks.discard(down)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        """Server to client, untouched (only held while stalled)."""
        try:
            while chunk := await reader.read(65536):
                await self._flowing.wait()
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            link.abort()

    async def _client_to_server(
        self, reader: asyncio.StreamReader, upstream: asyncio.StreamWriter, link: _Link
    ) -> str:
        """Forward the client's messages until it hangs up, it is refused at start-up
        ("refused"), a commit's acknowledgement is to be lost ("cut"), or a marked
        statement is to reset the connection ("reset")."""
        # Untyped start-up messages: SSL/GSS requests (answered by one byte), then the
        # StartupMessage (or a CancelRequest, after which the client hangs up).
        while True:
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            body = await reader.readexactly(length - 4)
            code = struct.unpack("!i", body[:4])[0] if len(body) >= 4 else 0
            if code not in (_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST):
                link.spared = bool(self.spare) and self.spare in body
                if self.refusing and not link.spared:  # "the database is gone"
                    self.counters.refused += 1
                    return "refused"
            await self._send(upstream, head + body)
            if code not in (_SSL_REQUEST, _GSS_REQUEST, _CANCEL_REQUEST):
                break
        while True:
            kind = await reader.readexactly(1)
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            body = await reader.readexactly(length - 4)
            message = kind + head + body
            if kind == b"P":  # Parse: statement name, query
                name, _, rest = body.partition(b"\0")
                link.statements[name] = rest.partition(b"\0")[0]
            elif kind == b"B":  # Bind: portal, statement
                statement = body.split(b"\0", 2)[1]
                if self.watch_marker and self.watch_marker in link.statements.get(statement, b""):
                    link.marked = True
                    if self.reset_on_marker > 0:
                        self.reset_on_marker -= 1
                        self.counters.marker_resets += 1
                        return "reset"
            elif kind == b"Q":  # a simple query: BEGIN / COMMIT / ROLLBACK from asyncpg
                sql = body.rstrip(b"\0").strip().upper()
                if self.watch_marker and self.watch_marker in body:
                    link.marked = True
                if sql.startswith(b"COMMIT") and self._lose_commit_ack(link):
                    await self._commit_then_cut(upstream, link, message)
                    return "cut"
                if sql.startswith((b"COMMIT", b"ROLLBACK", b"BEGIN")):
                    link.marked = False
                    link.in_block = sql.startswith(b"BEGIN")
            elif kind == b"S" and link.marked and not link.in_block:
                # Sync ends an implicit transaction: a marked autocommit statement
                # commits here.
                self.counters.autocommit_marked_commits += 1
                if self._lose_commit_ack(link):
                    await self._commit_then_cut(upstream, link, message)
                    return "cut"
                link.marked = False
            await self._send(upstream, message)

    def _lose_commit_ack(self, link: _Link) -> bool:
        """Count a commit point and decide whether its acknowledgement is lost."""
        self.counters.commits += 1
        self.counters.marked_commits += link.marked
        first_marked = link.marked and self.counters.marked_commit_acks_dropped == 0
        if first_marked and self.always_drop_first_marked and self.drop_marked_commit_ack:
            return True
        odds = self.drop_marked_commit_ack if link.marked else self.drop_commit_ack
        return bool(odds) and self._rng.random() < odds

    async def _commit_then_cut(
        self, upstream: asyncio.StreamWriter, link: _Link, commit: bytes
    ) -> None:
        """Cut the client first (it never hears back), then hand the server its COMMIT
        and end our side gracefully: the server reads the COMMIT before the end of the
        stream, so the transaction commits -- the acknowledgement alone is lost."""
        link.client.transport.abort()
        self.counters.commit_acks_dropped += 1
        if link.marked:
            self.counters.marked_commit_acks_dropped += 1
        await self._send(upstream, commit)
        if upstream.can_write_eof():
            upstream.write_eof()

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        await self._flowing.wait()
        writer.write(data)
        await writer.drain()
