"""OpenAPI declarations of error answers and headers, shared by the routers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from atlas_jobs._app.services.schemas import (
    BatchTooLargeProblem,
    JobStateProblem,
    Problem,
    ValidationProblem,
)

PROBLEM_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed JSON.",
    401: "Missing or invalid API key (`WWW-Authenticate: Bearer`).",
    403: "The key lacks the role for this action.",
    # 408 and 431 come from the HTTP layer, before any route.
    404: "Unknown job, or a job of another owner (indistinguishable).",
    409: "The job's state does not allow this (the body names it).",
    410: "Gone: the result's retention passed.",
    413: "The request body is too large.",
    415: "The body is not application/json.",
    422: "The request does not validate.",
    429: "Too many: unfinished jobs of this owner (creation), or open long-polls and event "
    "streams of this API key (Prefer: wait, events). See Retry-After.",
    503: "Not ready; the queue is backed up (creation); or the server holds all the "
    "long-polls and event streams it serves (Prefer: wait, events). See Retry-After.",
}

HEADER_SCHEMAS: dict[str, dict[str, Any]] = {
    "Location": {"description": "The job's status URL.", "schema": {"type": "string"}},
    "Retry-After": {
        "description": "Seconds to wait before polling again.",
        "schema": {"type": "integer"},
    },
    "ETag": {"description": 'Weak validator W/"<version>".', "schema": {"type": "string"}},
    "Vary": {
        "description": "Prefer (the wait preference changes the answer).",
        "schema": {"type": "string"},
    },
    "Preference-Applied": {
        "description": "wait=N when the read was held.",
        "schema": {"type": "string"},
    },
    "Idempotency-Replayed": {
        "description": "true when an earlier request with the same key made the job.",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "WWW-Authenticate": {"description": "Bearer.", "schema": {"type": "string"}},
    "X-Request-ID": {
        "description": "The request id (echoed or generated).",
        "schema": {"type": "string"},
    },
}


def headers(*names: str) -> dict[str, dict[str, Any]]:
    return {name: HEADER_SCHEMAS[name] for name in names}


PROBLEM_MODELS: dict[int, type[BaseModel]] = {409: JobStateProblem, 422: ValidationProblem}
"""Problem variants with typed extension members, by status (others: ``Problem``)."""


def problems(
    *codes: int,
    models: dict[int, type[BaseModel]] | None = None,
    descriptions: dict[int, str] | None = None,
) -> dict[int | str, dict[str, Any]]:
    """Problem answers for ``codes`` (plus 401, which every authenticated route has);
    ``models`` and ``descriptions`` override the shared ones for one route."""
    chosen = {**PROBLEM_MODELS, **(models or {})}
    described = {**PROBLEM_DESCRIPTIONS, **(descriptions or {})}
    declared: dict[int | str, dict[str, Any]] = {}
    for code in sorted({401, *codes}):
        entry: dict[str, Any] = {"model": chosen.get(code, Problem), "description": described[code]}
        if code == 401:
            entry["headers"] = headers("WWW-Authenticate")
        if code in {409, 429, 503}:
            entry["headers"] = headers("Retry-After")
        declared[code] = entry
    return declared


CREATION_PROBLEMS = problems(
    400,
    409,
    413,
    415,
    422,
    429,
    503,
    models={409: Problem, 413: BatchTooLargeProblem},
    descriptions={
        409: "A request with the same Idempotency-Key is still in flight; repeat it after "
        "Retry-After.",
        413: "The request body is too large, or (batch) holds more jobs than allowed "
        "(`batch-too-large`, with `max_jobs`).",
    },
)
"""The problem answers of ``POST /v1/jobs`` and ``POST /v1/jobs:batch``."""


def public_problems(
    *codes: int, descriptions: dict[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """Problem answers for routes that take no API key."""
    described = {**PROBLEM_DESCRIPTIONS, **(descriptions or {})}
    return {
        code: {"model": PROBLEM_MODELS.get(code, Problem), "description": described[code]}
        for code in codes
    }
