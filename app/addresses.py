"""The address the service binds unless told, and the URL a bind address is reached at
(a module of its own: the console command names them without loading the settings)."""

from __future__ import annotations

import ipaddress
from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8000


def bind_url(host: str, port: int) -> str:
    """``http://host:port`` for a bind address; a wildcard bind (0.0.0.0, ::) names the
    loopback address, the one reachable address it is sure to have (set
    ``ATLAS_PUBLIC_URL`` when clients reach the API under another name)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{shown}:{port}"
