"""The Atlas Jobs client library: HTTP calls (:class:`JobsClient`), the client-side
observation of a job (:class:`Observer`, :func:`follow`) and the typed errors. It needs
only httpx and :mod:`atlas_jobs._app.presentation` -- never the server's modules.

Names are imported when first used (PEP 562), so a console command that only prints its
help never loads httpx."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from atlas_jobs._app.client.address import DEFAULT_URL

if TYPE_CHECKING:
    from atlas_jobs._app.client.errors import (
        ApiUnreachableError,
        ClientError,
        IntegrityError,
        InvalidJobIdError,
        JobNotFoundError,
        KeyRejectedError,
        NotAllowedError,
        RefusedError,
        describe_problem,
    )
    from atlas_jobs._app.client.http import TERMINAL_STATES, JobsClient, StatusRead
    from atlas_jobs._app.client.observer import Observer, follow

_LAZY = {
    "ApiUnreachableError": "errors",
    "ClientError": "errors",
    "IntegrityError": "errors",
    "InvalidJobIdError": "errors",
    "JobNotFoundError": "errors",
    "KeyRejectedError": "errors",
    "NotAllowedError": "errors",
    "RefusedError": "errors",
    "describe_problem": "errors",
    "TERMINAL_STATES": "http",
    "JobsClient": "http",
    "StatusRead": "http",
    "Observer": "observer",
    "follow": "observer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "DEFAULT_URL",
    "TERMINAL_STATES",
    "ApiUnreachableError",
    "ClientError",
    "IntegrityError",
    "InvalidJobIdError",
    "JobNotFoundError",
    "JobsClient",
    "KeyRejectedError",
    "NotAllowedError",
    "Observer",
    "RefusedError",
    "StatusRead",
    "describe_problem",
    "follow",
]
