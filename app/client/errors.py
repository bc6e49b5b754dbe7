"""What can go wrong when a client talks to the service: a small typed tree.

Each error says in one line what happened and what to do; the CLI prints it and exits
with the error's code (``docs``: docs/cli.md "Client verbs"). None of them is a *job*
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


LOCATION_PARTS = frozenset({"body", "path", "query", "header"})


def error_field(loc: Any) -> str:
    """Where a validation error is, as the person typed it: ``pages`` for the job
    input's ``body.input.pages``, ``limit`` for the query's ``limit``."""
    parts = [str(part) for part in loc] if isinstance(loc, list | tuple) else []
    if parts[:1] and parts[0] in LOCATION_PARTS:
        parts = parts[1:]
    if parts[:1] == ["input"] and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts) or "request"


def describe_problem(status_code: int, problem: Mapping[str, Any]) -> str:
    """A problem answer (RFC 9457) for a person: ``HTTP <status> <title>``, its detail
    when it says more than the title, then each of its ``errors`` as a ``field:
    message`` line."""
    title = str(problem.get("title") or "refused")
    detail = problem.get("detail")
    lines = [f"HTTP {status_code} {title}"]
    if detail and str(detail) != title:
        lines[0] += f": {detail}"
    errors = problem.get("errors")
    for error in errors if isinstance(errors, list) else []:
        if isinstance(error, Mapping):
            lines.append(f"{error_field(error.get('loc'))}: {error.get('msg') or error}")
    return "\n".join(lines)


class RefusedError(ClientError):
    """Any other problem answer (RFC 9457): 409, 410, 422, 429, 503, ..."""

    def __init__(
        self, status_code: int, problem: Mapping[str, Any], retry_after: float | None = None
    ) -> None:
        super().__init__(describe_problem(status_code, problem))
        self.status_code = status_code
        self.problem = dict(problem)
        self.retry_after = retry_after


class InvalidJobIdError(ClientError):
    """A job id argument that is not one (the API answered 422 for its path)."""

    exit_code = 2

    def __init__(self, job_id: str) -> None:
        super().__init__(
            f"{job_id} is not a job id (a job id is a UUID, as `atlas-jobs submit` prints)"
        )
        self.job_id = job_id


class IntegrityError(ClientError):
    """A downloaded file does not match the sha256 of the result reference."""

    exit_code = 6


__all__ = [
    "ApiUnreachableError",
    "ClientError",
    "IntegrityError",
    "InvalidJobIdError",
    "JobNotFoundError",
    "KeyRejectedError",
    "NotAllowedError",
    "RefusedError",
    "describe_problem",
]
