"""The Atlas Jobs client library: HTTP calls (:class:`JobsClient`), the client-side
observation of a job (:class:`Observer`, :func:`follow`) and the typed errors. It needs
only httpx and :mod:`atlas_jobs._app.presentation` -- never the server's modules."""

from atlas_jobs._app.client.errors import (
    ApiUnreachableError,
    ClientError,
    IntegrityError,
    JobNotFoundError,
    KeyRejectedError,
    NotAllowedError,
    RefusedError,
)
from atlas_jobs._app.client.http import DEFAULT_URL, TERMINAL_STATES, JobsClient, StatusRead
from atlas_jobs._app.client.observer import Observer, follow

__all__ = [
    "DEFAULT_URL",
    "TERMINAL_STATES",
    "ApiUnreachableError",
    "ClientError",
    "IntegrityError",
    "JobNotFoundError",
    "JobsClient",
    "KeyRejectedError",
    "NotAllowedError",
    "Observer",
    "RefusedError",
    "StatusRead",
    "follow",
]
