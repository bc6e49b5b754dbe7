"""An HTTP transport that connects only to addresses checked beforehand.

The webhook sender resolves each endpoint's host once and checks every address it got
(:func:`atlas_jobs._app.webhooks.check_url`). Handing the URL to an ordinary client would resolve
the name a second time -- the window a DNS-rebinding server uses to answer a public address to the
check and ``127.0.0.1`` to the connection. This transport never resolves: its network backend maps
``(host, port)`` to the pinned addresses and opens the TCP connection to them (in order, the first
that answers); the request keeps its URL, so the ``Host`` header, the TLS SNI and the certificate's
verification are the original host name's. A host that was not pinned is a connection error, not a
lookup.
"""

from __future__ import annotations

import typing

import httpcore
import httpx

from atlas_jobs._app.webhooks import Target


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, pins: dict[tuple[str, int], tuple[str, ...]]) -> None:
        self._pins = pins
        self._tcp = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = self._pins.get((host.lower(), port))
        if not addresses:
            raise httpcore.ConnectError(f"{host}:{port} was not checked; not connecting")
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._tcp.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None  # at least one address was tried
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._tcp.sleep(seconds)


class PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a pool whose connections go to pinned addresses only.

    :meth:`pin` records a checked :class:`~atlas_jobs._app.webhooks.Target`; the first pin of a
    ``(host, port)`` holds for the transport's life (one sender pass), so every request
    of the pass to that host goes where the check looked. No proxy (one would resolve
    the name itself), no environment configuration."""

    def __init__(self, *, limits: httpx.Limits = httpx.Limits()) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pins: dict[tuple[str, int], tuple[str, ...]] = {}
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinnedBackend(self._pins),
        )

    def pin(self, target: Target) -> Target:
        """Connect to ``target``'s addresses for its host; the first pin wins."""
        key = (target.host.lower(), target.port)
        self._pins.setdefault(key, target.addresses)
        return target
