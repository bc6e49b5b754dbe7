"""What can go wrong when a client talks to the service: a small typed tree.

Each error says in one line what happened and what to do; the CLI prints it and exits
with the error's code (``docs``: README "Client exit codes"). None of them is a *job*
failure: they describe the request, or the connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ClientError(Exception):
    """A request did not get the answer it asked for."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApiUnreachableError(ClientError):
    """No HTTP answer at all: refused, reset, timed out, name not resolved."""

    exit_code = 3

    def __init__(self, url: str, cause: BaseException) -> None:
        why = type(cause).__name__
        super().__init__(
            f"cannot reach the Atlas API at {url} ({why}); is it running? (set --url or ATLAS_URL)"
        )
        self.url = url
        self.cause_name = why


class KeyRejectedError(ClientError):
    """401: the API key is missing, unknown or revoked."""

    exit_code = 4

    def __init__(self) -> None:
        super().__init__("the API key was rejected (401); check --api-key or ATLAS_API_KEY")


class NotAllowedError(ClientError):
    """403: the key is valid but lacks the role, or a signed link is bad or expired."""

    exit_code = 4


class JobNotFoundError(ClientError):
    """404: no such job, or not this key's (the service does not tell them apart)."""

    exit_code = 5

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} not found (unknown, or not visible to this key)")
        self.job_id = job_id


class RefusedError(ClientError):
    """Any other problem answer (RFC 9457): 409, 410, 422, 429, 503, ..."""

    def __init__(
        self, status_code: int, problem: Mapping[str, Any], retry_after: float | None = None
    ) -> None:
        title = problem.get("title") or "refused"
        detail = problem.get("detail")
        text = f"{title}: {detail}" if detail else str(title)
        super().__init__(f"HTTP {status_code} {text}")
        self.status_code = status_code
        self.problem = dict(problem)
        self.retry_after = retry_after


class IntegrityError(ClientError):
    """A downloaded file does not match the sha256 of the result reference."""

    exit_code = 6


__all__ = [
    "ApiUnreachableError",
    "ClientError",
    "IntegrityError",
    "JobNotFoundError",
    "KeyRejectedError",
    "NotAllowedError",
    "RefusedError",
]
