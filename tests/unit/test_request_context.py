"""The request context middleware: the request id reaches the routes through its own
context variable, and the log context is copied for the unexpected-error handler only
when an error passes through (a successful request copies nothing)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from atlas_jobs._app.api.errors import LOG_CONTEXT_KEY
from atlas_jobs._app.api.metrics import ApiMetrics
from atlas_jobs._app.api.middleware import REQUEST_ID, RequestContextMiddleware


class Recorder:
    """An ASGI app that records what the middleware left it, then answers or fails."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.scopes: list[Scope] = []
        self.seen_ids: list[str | None] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scopes.append(scope)
        self.seen_ids.append(REQUEST_ID.get())
        if self.fail:
            raise RuntimeError("boom")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def _client(app: Any) -> httpx.AsyncClient:
    wrapped = RequestContextMiddleware(app, metrics=ApiMetrics(), templates=frozenset)
    transport = httpx.ASGITransport(app=wrapped, raise_app_exceptions=True)
    return httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_the_request_id_reaches_the_route_and_nothing_is_copied_on_success() -> None:
    app = Recorder()
    async with _client(app) as client:
        echoed = await client.get("/v1/jobs", headers={"X-Request-ID": "req-42"})
        generated = await client.get("/v1/jobs")
    assert echoed.headers["x-request-id"] == "req-42"
    assert app.seen_ids[0] == "req-42"
    assert app.seen_ids[1] == generated.headers["x-request-id"]
    assert all(LOG_CONTEXT_KEY not in scope for scope in app.scopes)
    assert REQUEST_ID.get() is None  # reset once the request is answered


async def test_an_error_leaves_the_log_context_for_the_error_handler() -> None:
    app = Recorder(fail=True)
    async with _client(app) as client:
        with pytest.raises(RuntimeError):
            await client.get("/v1/jobs", headers={"X-Request-ID": "req-43"})
    assert app.scopes[0][LOG_CONTEXT_KEY]["request_id"] == "req-43"
    assert REQUEST_ID.get() is None
