"""The framing every Server-Sent Events response shares (the API's job events and the
status page's live panel): sse-starlette's ``EventSourceResponse`` sends the keep-alive
comment every ``KEEPALIVE_SECONDS`` (so proxies do not close an idle stream) and notices
a client that left; :class:`WatchedStream` gives the feed's watcher slot back however the
stream ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from atlas_jobs._app.services.feeds import Watcher

KEEPALIVE_SECONDS = 15.0
RETRY_MILLISECONDS = 2000
SEP = "\n"
"""Line separator of every frame (sse-starlette defaults to CRLF; LF is as valid and is
what this stream always sent)."""


class WatchedStream(EventSourceResponse):
    """A stream that gives its watcher slot back however it ends -- also when the
    client left before the first byte, and the body was never started."""

    def __init__(self, content: AsyncIterator[ServerSentEvent], *, watcher: Watcher) -> None:
        super().__init__(
            content,
            headers={"Cache-Control": "no-store"},
            ping=KEEPALIVE_SECONDS,
            sep=SEP,
        )
        self.watcher = watcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.watcher.close()
