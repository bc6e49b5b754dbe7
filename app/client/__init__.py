"""The Atlas Jobs client library: HTTP calls (:class:`JobsClient`), the client-side
observation of a job (:class:`Observer`, :func:`follow`) and the typed errors. It needs
only httpx and :mod:`atlas_jobs._app.presentation` -- never the server's modules."""

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
from atlas_jobs._app.client.http import DEFAULT_URL, TERMINAL_STATES, JobsClient, StatusRead
from atlas_jobs._app.client.observer import Observer, follow

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
