"""uvicorn's h11 protocol with a bound on the time to send a request head.

uvicorn closes a keep-alive connection that stays idle *after* a response, but a new
connection that never sends a byte, or trickles its request line and headers one byte at
a time, is held for as long as the client likes: each holds a file descriptor, and
enough of them (tens of thousands from one machine, no key needed) leave the process
none to accept anyone else (a reliability finding). Servers bound this separately from the
body (nginx ``client_header_timeout``, Go's ``ReadHeaderTimeout``); so do we:

- the clock starts when the connection is accepted, and again when the first byte of a
  later request on a kept-alive connection arrives;
- it stops when the request head is complete (the body has its own timeout,
  ``ATLAS_HTTP_BODY_TIMEOUT_SECONDS``);
- when it runs out, the connection is closed without an answer: there is no request to
  answer, and nothing was accepted.

A request h11 refuses (a NUL or another control character in a header, a malformed
``Content-Length``, a head over ``ATLAS_HTTP_MAX_HEADER_BYTES``) never reaches the app:
uvicorn answered it ``400 text/plain``; here it is a problem like every other answer
(``400 malformed-request``, ``431 request-header-fields-too-large``), and the connection
closes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

from atlas_jobs._app.api.errors import (
    PROBLEM_MEDIA_TYPE,
    ApiError,
    HeadersTooLargeError,
    MalformedRequestError,
    problem_body,
)
from atlas_jobs._app.logs import get_logger

log = get_logger("atlas.api.http")


class _RecordingConnection(h11.Connection):
    """h11's connection, remembering the protocol error that ended it (uvicorn's handler
    drops it before answering)."""

    protocol_error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            return super().next_event()
        except h11.RemoteProtocolError as exc:
            self.protocol_error = exc
            raise


def _malformed(error: h11.RemoteProtocolError | None) -> ApiError:
    """The problem for a request h11 refused. h11's message is not echoed: it quotes
    the offending bytes (a header's value may be a secret); the category is named."""
    if error is not None and error.error_status_hint == 431:
        return HeadersTooLargeError("The request line and headers are too large")
    message = str(error or "").lower()
    if "content-length" in message or "transfer-encoding" in message:
        detail = "Malformed Content-Length or Transfer-Encoding"
    elif "header" in message:
        detail = (
            "A header name or value HTTP does not allow (RFC 9110 section 5.5): for "
            "example a NUL or another control character"
        )
    else:
        detail = "The request line or headers are not valid HTTP/1.1"
    return MalformedRequestError(detail)


class HeadTimeoutH11Protocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose request head is late, and
    answers a request h11 cannot parse with a problem (``application/problem+json``,
    from :mod:`atlas_jobs._app.api.errors`) instead of uvicorn's ``400 text/plain``."""

    head_timeout_seconds: float = 10.0

    def __init__(self, config: Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        limit = config.h11_max_incomplete_event_size
        self.conn = (
            _RecordingConnection(h11.SERVER)  # h11's own default limit
            if limit is None
            else _RecordingConnection(h11.SERVER, limit)
        )

    def send_400_response(self, msg: str) -> None:
        """What uvicorn calls for a request h11 refused: the same answer (and the
        connection closes), as an RFC 9457 problem."""
        recorded = self.conn.protocol_error if isinstance(self.conn, _RecordingConnection) else None
        problem = _malformed(recorded)
        body = json.dumps(problem_body(problem)).encode()
        log.info("http.malformed_request", status=problem.status, problem=problem.slug)
        headers = [
            (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=problem.status, headers=headers),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

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
