"""Running the API under uvicorn, with a shutdown that load balancers can follow.

On SIGTERM (or SIGINT) :class:`DrainingServer` does not stop listening at once:

1. it marks the process draining -- ``/readyz`` answers 503 from now on -- and ends
   every held read and event stream (:meth:`atlas_jobs._app.services.feeds.FeedHub.drain`): a
   long-poll
   answers the current status at once (with ``Retry-After``), a stream ends after the
   ``retry:`` hint it opened with, so clients reconnect to another instance;
2. for ``ATLAS_SHUTDOWN_DRAIN_SECONDS`` it keeps serving, so that a load balancer sees
   the 503 and stops sending requests;
3. then uvicorn's graceful shutdown: the listener closes, requests in flight finish
   within the rest of ``ATLAS_SHUTDOWN_GRACE_SECONDS``, the lifespan closes the pools.

A second signal skips what is left of step 2.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from atlas_jobs._app.api.http_protocol import protocol_with_head_timeout
from atlas_jobs._app.api.middleware import ContainAnsweredErrors
from atlas_jobs._app.logs import get_logger
from atlas_jobs._app.settings import Settings

log = get_logger("atlas.api.serving")


def begin_drain(app: FastAPI) -> None:
    """Report not-ready and let every watcher go (step 1 of the module doc)."""
    state = getattr(app.state, "atlas", None)
    if state is None:  # the lifespan has not started: nothing to drain
        return
    state.draining = True
    state.feeds.drain()


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, *, on_drain: Callable[[], None], drain_seconds: float
    ) -> None:
        super().__init__(config)
        self.on_drain = on_drain
        self.drain_seconds = drain_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining = False

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self._loop is None:
            super().handle_exit(sig, frame)
            return
        self._draining = True
        self._loop.call_soon_threadsafe(self._drain_then_exit, sig)

    def _drain_then_exit(self, sig: int) -> None:
        log.info("api.draining", seconds=self.drain_seconds)
        self.on_drain()
        assert self._loop is not None
        self._loop.call_later(self.drain_seconds, uvicorn.Server.handle_exit, self, sig, None)


def run_api(app: FastAPI, settings: Settings, *, host: str, port: int) -> None:
    """Serve ``app`` until a signal, then drain (module doc)."""
    drain = settings.shutdown_drain_seconds
    config = uvicorn.Config(
        ContainAnsweredErrors(app),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_seconds - drain)),
        # Bounds for clients without a key (docs/http-api.md "HTTP limits"). h11, not httptools:
        # only h11 bounds the size of the request line and headers.
        http=protocol_with_head_timeout(settings.http_head_timeout_seconds),
        h11_max_incomplete_event_size=settings.http_max_header_bytes,
        limit_concurrency=settings.http_limit_concurrency,
        timeout_keep_alive=settings.http_keep_alive_seconds,
    )
    DrainingServer(config, on_drain=lambda: begin_drain(app), drain_seconds=drain).run()
