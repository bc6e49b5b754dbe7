"""One LISTEN connection that stays up: the only reconnect loop, for the API and the workers.

A :class:`Listener` holds a dedicated asyncpg connection (never one from the SQLAlchemy
pool: a pooled connection would be recycled, and its LISTEN with it) listening on one
channel. Every payload goes to ``on_payload``. After every (re)connect it calls
``on_connected``: notifications sent while it was disconnected are lost for good, so the
owner must re-read whatever it was waiting for (the API wakes every subscriber, a worker
wakes its claim loop).

Every failure ends the same way -- a connect error, a failing ``LISTEN``, the server
terminating the connection, a failed liveness check, an exception from
``on_connected``: one warning (channel, application name, error class; never a
payload), a pause chosen by :class:`Backoff`, and a new connection. :meth:`Listener.run`
only ends when it is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import asyncpg

from atlas_jobs._app.logs import get_logger

log = get_logger("atlas.db.listen")


class ConnectionLostError(Exception):
    """The LISTEN connection ended without an error of its own (server terminated it)."""


@dataclass(frozen=True)
class Backoff:
    """Pause before reconnect number ``failures`` (1, 2, ...) since the last healthy one.

    Exponential, capped, with jitter: the bound doubles from ``initial_seconds`` up to
    ``max_seconds``, and the pause is drawn from its upper half ("equal jitter"), so a
    fleet that lost the database together does not reconnect in lockstep, yet never
    retries in a tight loop. A connection that stayed up ``healthy_seconds`` resets the
    count: the next failure waits ``initial_seconds`` again.
    """

    initial_seconds: float = 0.2
    max_seconds: float = 5.0
    healthy_seconds: float = 5.0

    def bound(self, failures: int) -> float:
        exponent = min(max(failures, 1) - 1, 32)
        return float(min(self.max_seconds, self.initial_seconds * 2**exponent))

    def delay(self, failures: int) -> float:
        bound = self.bound(failures)
        return bound / 2 + random.uniform(0, bound / 2)  # noqa: S311 - jitter, not a secret # nosec B311


DEFAULT_BACKOFF = Backoff()


class Listener:
    """LISTEN ``channel`` on a dedicated connection, reconnecting forever (see module doc).

    ``on_payload`` runs in asyncpg's notification callback: it must be quick and must
    not block (set an event, split a string). An exception from it is logged and the
    connection kept. ``check_seconds`` bounds how long a silently dead connection (no
    FIN from a vanished server) can go unnoticed: when nothing ended the connection for
    that long, a ``SELECT 1`` must answer within the same time.
    """

    def __init__(
        self,
        dsn: str,
        channel: str,
        *,
        on_payload: Callable[[str], None],
        on_connected: Callable[[], None],
        application_name: str,
        backoff: Backoff = DEFAULT_BACKOFF,
        check_seconds: float = 30.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.channel = channel
        self.application_name = application_name[:63]
        self.backoff = backoff
        self.check_seconds = check_seconds
        self.connect_timeout = connect_timeout
        self._on_payload = on_payload
        self._on_connected = on_connected
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listening_since: float | None = None  # monotonic, while a connection lives
        self.connections = 0  # successful (re)connects since creation
        self.failures = 0  # failed attempts and lost connections since creation

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self, seconds: float) -> bool:
        """True once listening; False if not connected within ``seconds``."""
        try:
            await asyncio.wait_for(self._connected.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    def start(self) -> asyncio.Task[None]:
        """Run in a background task (once); :meth:`stop` cancels it."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"listen:{self.channel}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """Listen until cancelled. Never returns and never raises anything else."""
        failures = 0  # consecutive, since the last healthy connection
        while True:
            try:
                await self._listen()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.failures += 1
                since = self._listening_since
                healthy = since is not None and (
                    time.monotonic() - since >= self.backoff.healthy_seconds
                )
                failures = 1 if healthy else failures + 1
                pause = self.backoff.delay(failures)
                log.warning(
                    "listen.reconnecting",
                    channel=self.channel,
                    application_name=self.application_name,
                    error_class=type(exc).__name__,
                    was_listening=since is not None,
                    consecutive_failures=failures,
                    retry_in_seconds=round(pause, 3),
                )
            await asyncio.sleep(pause)

    async def _listen(self) -> NoReturn:
        """One connection's life; always ends by raising (see :meth:`run`)."""
        self._listening_since = None
        conn: Any = await asyncpg.connect(
            self.dsn,
            timeout=self.connect_timeout,
            server_settings={"application_name": self.application_name},
        )
        try:
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _conn: lost.set())
            await conn.add_listener(self.channel, self._dispatch)
            if conn.is_closed():
                raise ConnectionLostError("closed while starting to listen")
            self._listening_since = time.monotonic()
            self.connections += 1
            self._connected.set()
            self._on_connected()  # whatever was sent while we were away is lost: re-read
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), timeout=self.check_seconds)
                if lost.is_set() or conn.is_closed():
                    raise ConnectionLostError("terminated by the server")
                await conn.execute("SELECT 1", timeout=self.check_seconds)
        finally:
            self._connected.clear()
            if not conn.is_closed():
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close(timeout=2))

    def _dispatch(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        try:
            self._on_payload(payload)
        except Exception as exc:  # a handler bug must not take the connection down
            log.warning(
                "listen.handler_failed",
                channel=self.channel,
                application_name=self.application_name,
                error_class=type(exc).__name__,
            )
