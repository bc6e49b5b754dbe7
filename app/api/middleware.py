"""Pure ASGI middleware: request context (id, logs, metrics) and the body guard.

Pure ASGI rather than ``BaseHTTPMiddleware`` so streaming responses (SSE, downloads)
pass through untouched and contextvars bound here reach the handlers.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import (
    ApiError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    problem_response,
)
from app.api.metrics import ApiMetrics
from app.api.paths import route_template

log = structlog.get_logger("atlas.api.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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
        self.templates = templates

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
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
                self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.requests.labels(method, route, str(status)).inc()
            log.info(
                "request",
                method=method,
                route=route,
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 1),
            )
            structlog.contextvars.clear_contextvars()


def _is_json(content_type: str | None) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class BodyGuardMiddleware:
    """413 for bodies over the limit -- decided from Content-Length, or by counting a
    streamed body and stopping at the limit, never after reading it all -- and 415 for a
    body that is not JSON. The accepted body is replayed to the app unchanged."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
            except ValueError:
                length = -1
            if length < 0:
                await self._answer(
                    scope, receive, send, PayloadTooLargeError("Invalid Content-Length")
                )
                return
            if length > self.max_body_bytes:
                await self._answer(scope, receive, send, self._too_large())
                return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._answer(scope, receive, send, self._too_large())
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if body and not _is_json(_header(scope, b"content-type")):
            await self._answer(scope, receive, send, UnsupportedMediaTypeError())
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

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


__all__ = ["BodyGuardMiddleware", "RequestContextMiddleware", "route_template"]
