"""Pure ASGI middleware: request context (id, logs, metrics) and the request guard
(body size, media type, and text PostgreSQL cannot store).

Pure ASGI rather than ``BaseHTTPMiddleware`` so streaming responses (SSE, downloads)
pass through untouched and contextvars bound here reach the handlers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qsl

import structlog
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from atlas_jobs._app.api.errors import (
    LOG_CONTEXT_KEY,
    ApiError,
    HeadersTooLargeError,
    InvalidInputError,
    InvalidRequestError,
    MalformedRequestError,
    PayloadTooLargeError,
    RequestTimeoutError,
    UnexpectedErrorHandler,
    UnsupportedCharsetError,
    UnsupportedMediaTypeError,
    in_job_input,
    problem_response,
)
from atlas_jobs._app.api.metrics import ApiMetrics
from atlas_jobs._app.api.paths import route_template

log = structlog.get_logger("atlas.api.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
CLIENT_DISCONNECTED = "atlas.client_disconnected"
"""Scope flag: the client went away before the request was answered (not a 5xx)."""
CLIENT_CLOSED_STATUS = 499  # the status recorded (never sent) for such a request
REQUEST_ID: ContextVar[str | None] = ContextVar("atlas_request_id", default=None)
"""The request id of the request being served (also bound to the log context): read
by routes that record it, without copying the whole log context."""

# Text PostgreSQL cannot store in ``text`` or ``jsonb``: NUL, and UTF-16 surrogates that
# are not part of a pair (JSON can spell both as escapes). Storing either fails inside the
# database -- a 500 -- so both are refused at the edge with a 422 naming the field.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# A cheap pre-check on the raw JSON: both can only be written as \u escapes there (a raw
# control character is invalid JSON). False positives (an escaped backslash) are harmless.
_UNSTORABLE_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")
UNSTORABLE_MESSAGE = (
    "Text here contains a character that cannot be stored "
    "(a NUL character or an unpaired UTF-16 surrogate)"
)
_MAX_REPORTED = 20


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            decoded: str = value.decode("latin-1")
            return decoded
    return None


class RequestContextMiddleware:
    """X-Request-ID in and out, one access log line per request, request metrics."""

    def __init__(
        self, app: ASGIApp, metrics: ApiMetrics, templates: Callable[[], frozenset[str]]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self._templates = templates
        self._known: frozenset[str] | None = None
        # Labelled metric children by their labels (``labels()`` validates and locks on
        # every call); bounded by routes x methods x statuses.
        self._latency: dict[tuple[str, str], Any] = {}
        self._requests: dict[tuple[str, str, str], Any] = {}

    def templates(self) -> frozenset[str]:
        """The route templates, computed once: the app's routes are fixed once serving."""
        if self._known is None:
            self._known = self._templates()
        return self._known

    def _observe(self, method: str, route: str, seconds: float) -> None:
        child = self._latency.get((method, route))
        if child is None:
            child = self._latency[(method, route)] = self.metrics.latency.labels(method, route)
        child.observe(seconds)

    def _count(self, method: str, route: str, status: str) -> None:
        child = self._requests.get((method, route, status))
        if child is None:
            child = self.metrics.requests.labels(method, route, status)
            self._requests[(method, route, status)] = child
        child.inc()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        request_id = incoming if incoming and _REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        method = scope["method"]
        route = route_template(scope["path"], self.templates)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
                message = {**message, "headers": headers}
                self._observe(method, route, time.perf_counter() - started)
            await send(message)

        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            # The unexpected-error handler runs outside this middleware (Starlette's
            # ServerErrorMiddleware), after the context is cleared: leave it a copy.
            scope[LOG_CONTEXT_KEY] = structlog.contextvars.get_contextvars()
            raise
        finally:
            REQUEST_ID.reset(token)
            event = "request"
            if scope.get(CLIENT_DISCONNECTED) and status == 500:  # nothing was sent
                event, status = "client_disconnected", CLIENT_CLOSED_STATUS
            self._count(method, route, str(status))
            log.info(
                event,
                method=method,
                route=route,
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
            )
            structlog.contextvars.clear_contextvars()


_UTF_BOMS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16 (and UTF-32 LE) byte order marks


def _not_utf8(content_type: str | None, body: bytes) -> bool:
    """A JSON body in another encoding than UTF-8 (RFC 8259 section 8.1): a ``charset``
    parameter naming another one, a UTF-16/32 byte order mark, or NUL bytes -- which JSON
    text never holds raw (outside strings only whitespace may appear, inside them control
    characters are escaped), but UTF-16 and UTF-32 put beside every ASCII character.
    (``json.loads`` of bytes would otherwise detect and decode them.)"""
    for parameter in (content_type or "").split(";")[1:]:
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in {"utf-8", "utf8"}:
            return True
    return body.startswith(_UTF_BOMS) or b"\x00" in body


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


Location = tuple[str | int, ...]


def unstorable_locations(value: Any, location: Location) -> list[Location]:
    """Where ``value`` (decoded JSON) holds text that cannot be stored, keys included."""
    found: list[Location] = []
    pending: list[tuple[Any, Location]] = [(value, location)]
    while pending and len(found) < _MAX_REPORTED:
        item, where = pending.pop()
        if isinstance(item, str):
            if _UNSTORABLE.search(item):
                found.append(where)
        elif isinstance(item, dict):
            for key, child in item.items():
                if _UNSTORABLE.search(key):
                    found.append((*where, key))
                pending.append((child, (*where, key)))
        elif isinstance(item, list):
            pending.extend((child, (*where, index)) for index, child in enumerate(item))
    return sorted(found, key=lambda loc: [str(part) for part in loc])


def unstorable_text_error(locations: list[Location]) -> ApiError:
    """422 naming each field; the offending values are never echoed."""
    errors = [
        {"loc": [str(part) for part in loc], "msg": UNSTORABLE_MESSAGE, "type": "string_unstorable"}
        for loc in locations
    ]
    if all(in_job_input(loc) for loc in locations):
        return InvalidInputError(errors=errors)
    return InvalidRequestError("The request contains text that cannot be stored", errors=errors)


def _unstorable_query_or_headers(scope: Scope) -> list[Location]:
    found: list[Location] = []
    query: bytes = scope.get("query_string", b"")
    if query:
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True, errors="replace")
        for name, value in pairs:
            if _UNSTORABLE.search(name) or _UNSTORABLE.search(value):
                found.append(("query", name.replace("\x00", "")))
    for name, value in scope.get("headers", ()):
        if b"\x00" in value:
            found.append(("header", name.decode("latin-1")))
    return found[:_MAX_REPORTED]


def _unstorable_body(body: bytes) -> list[Location]:
    if not _UNSTORABLE_ESCAPE.search(body):
        return []
    try:
        decoded = json.loads(body)
    except ValueError:
        return []  # not JSON: the app answers 400
    return unstorable_locations(decoded, ("body",))


class _Refused(Exception):  # noqa: N818 - control flow inside the guard
    """The body is not read to its end: ``error`` is the answer (``None``: nobody to
    answer, the client left)."""

    def __init__(self, error: ApiError | None) -> None:
        super().__init__()
        self.error = error


class BodyGuardMiddleware:
    """The request guard. 413 for bodies over the limit -- decided from Content-Length,
    or by counting a streamed body and stopping at the limit, never after reading it
    all -- 415 for a body that is not JSON (form-encoded bodies pass on ``form_paths``,
    the status page's forms), and 422 naming the field for text
    PostgreSQL cannot store, in the body, the query string or a header. The accepted
    body is replayed to the app unchanged. A method no route takes on the path is left
    to the router (405 comes first, whatever the body), and a JSON body that is not
    UTF-8 is 415 ``unsupported-charset``."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        body_timeout_seconds: float = 30.0,
        max_header_bytes: int = 64 * 1024,
        form_paths: tuple[str, ...] = (),
        routed: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.app = app
        self.form_paths = form_paths
        self.routed = routed or (lambda method, path: True)
        """Whether a route takes ``method`` on ``path`` (else the guard steps aside)."""
        self.max_body_bytes = max_body_bytes
        self.body_timeout_seconds = body_timeout_seconds
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # The server (h11) bounds what it buffers of an incomplete request head; a head
        # that arrived whole in one read is measured here.
        head = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
        head += sum(len(name) + len(value) + 4 for name, value in scope.get("headers", ()))
        if head > self.max_header_bytes:
            error = HeadersTooLargeError(
                f"The request line and headers are limited to {self.max_header_bytes} bytes"
            )
            await self._answer(scope, receive, send, error)
            return
        unstorable = _unstorable_query_or_headers(scope)
        if unstorable:
            await self._answer(scope, receive, send, unstorable_text_error(unstorable))
            return
        if scope["method"] not in _BODY_METHODS or not self.routed(scope["method"], scope["path"]):
            # No body to guard, or no route takes this method here: the router answers
            # (405 with Allow, 404) before anything is said about the body.
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            length = int(declared) if declared.isdigit() else -1
            if length < 0:  # (the server, h11, refuses these before the app sees them)
                await self._answer(
                    scope, receive, send, MalformedRequestError("Malformed Content-Length")
                )
                return
            if length > self.max_body_bytes:
                await self._answer(scope, receive, send, self._too_large())
                return
        # The whole body must arrive within the timeout: a client trickling (or holding)
        # a partial body gets 408 and the connection closes. One timer for the whole
        # body (not a task per chunk).
        try:
            async with asyncio.timeout(self.body_timeout_seconds):
                body = await self._read_body(scope, receive)
        except TimeoutError:
            late = RequestTimeoutError(
                f"The body must arrive within {self.body_timeout_seconds:g} s"
            )
            await self._answer(scope, receive, send, late)
            return
        except _Refused as refused:
            if refused.error is not None:
                await self._answer(scope, receive, send, refused.error)
            return
        content_type = _header(scope, b"content-type")
        if body and not (_is_json(content_type) or self._form_allowed(scope, content_type)):
            await self._answer(scope, receive, send, UnsupportedMediaTypeError())
            return
        if body and _is_json(content_type) and _not_utf8(content_type, body):
            await self._answer(
                scope,
                receive,
                send,
                UnsupportedCharsetError(
                    "Send the JSON body as UTF-8 (RFC 8259 section 8.1), without a "
                    "byte order mark; UTF-16 and UTF-32 are refused"
                ),
            )
            return
        unstorable = _unstorable_body(body)
        if unstorable:
            await self._answer(scope, receive, send, unstorable_text_error(unstorable))
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        """The whole body, or :class:`_Refused` (too large; the client left)."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope[CLIENT_DISCONNECTED] = True  # logged as such, not as a 500
                raise _Refused(None)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _Refused(self._too_large())
            chunks.append(chunk)
            more = message.get("more_body", False)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _form_allowed(self, scope: Scope, content_type: str | None) -> bool:
        """HTML forms (the status page's) may post form-encoded bodies on their paths."""
        media = (content_type or "").split(";", 1)[0].strip().lower()
        return media == "application/x-www-form-urlencoded" and any(
            scope["path"].startswith(prefix) for prefix in self.form_paths
        )

    def _too_large(self) -> ApiError:
        return PayloadTooLargeError(
            f"Request bodies are limited to {self.max_body_bytes} bytes",
            max_bytes=self.max_body_bytes,
        )

    @staticmethod
    async def _answer(scope: Scope, receive: Receive, send: Send, error: ApiError) -> None:
        response = problem_response(error)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


class AnswerUnexpectedErrors:
    """Answers an exception no route expected *inside* the request context, with the
    one translation of :mod:`atlas_jobs._app.api.errors` (an outage: ``503 database-unavailable`` +
    ``Retry-After``; a bug: ``500``), so the access log, ``atlas_http_requests_total``,
    the latency histogram and ``X-Request-ID`` all carry the status the client got.
    (Starlette's own last resort, ``ServerErrorMiddleware``, runs outside every user
    middleware: its answer was recorded as a 500 without a request id.) An error after
    the response started cannot be answered: it propagates as before."""

    def __init__(self, app: ASGIApp, handler: UnexpectedErrorHandler) -> None:
        self.app = app
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            if started:
                raise
            response = await self.handler(Request(scope), exc)
            await response(scope, receive, send)


class ContainAnsweredErrors:
    """The outermost wrapper of the app given to the server. Starlette's
    ``ServerErrorMiddleware`` answers an unexpected error with a 500 and calls our handler
    (which logs it without data, see ``unexpected_error_fields``), then re-raises it so
    the server logs it again -- as a full traceback whose text can quote SQL parameters
    or a constraint's key values. The error was answered and logged: it stops here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # already answered and logged
            log.debug("error_contained", error_type=type(exc).__name__)


__all__ = [
    "CLIENT_DISCONNECTED",
    "REQUEST_ID",
    "AnswerUnexpectedErrors",
    "BodyGuardMiddleware",
    "ContainAnsweredErrors",
    "RequestContextMiddleware",
    "route_template",
]
