"""uvicorn's h11 protocol with a bound on the time to send a request head.

uvicorn closes a keep-alive connection that stays idle *after* a response, but a new
connection that never sends a byte, or trickles its request line and headers one byte at
a time, is held for as long as the client likes: each holds a file descriptor, and
enough of them (tens of thousands from one machine, no key needed) leave the process
none to accept anyone else (issue 8, finding 4). Servers bound this separately from the
body (nginx ``client_header_timeout``, Go's ``ReadHeaderTimeout``); so do we:

- the clock starts when the connection is accepted, and again when the first byte of a
  later request on a kept-alive connection arrives;
- it stops when the request head is complete (the body has its own timeout,
  ``ATLAS_HTTP_BODY_TIMEOUT_SECONDS``);
- when it runs out, the connection is closed without an answer: there is no request to
  answer, and nothing was accepted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from atlas_jobs._app.logs import get_logger

log = get_logger("atlas.api.http")


class HeadTimeoutH11Protocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request head is late."""

    head_timeout_seconds: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_head():
            if self._head_timer is None:  # the first byte of a later request
                self._arm_head_timer()
        else:
            self._disarm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _awaiting_head(self) -> bool:
        return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_seconds, self._head_too_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if self._awaiting_head():
            log.debug("http.head_timeout", seconds=self.head_timeout_seconds)
            self.transport.close()


def protocol_with_head_timeout(seconds: float) -> type[HeadTimeoutH11Protocol]:
    """The protocol class for ``uvicorn.Config(http=...)`` with this head timeout."""
    return type(
        "HeadTimeoutH11Protocol", (HeadTimeoutH11Protocol,), {"head_timeout_seconds": seconds}
    )
