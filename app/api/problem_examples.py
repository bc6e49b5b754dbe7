"""One example problem per error answer of the OpenAPI document: a real instance of what
that operation answers with that status (``/docs`` and generated SDKs show it), built
from the error classes themselves, so a type, title or status cannot drift."""

from __future__ import annotations

from typing import Any

from atlas_jobs._app.api import errors

_BY_STATUS: dict[int, type[errors.ApiError]] = {
    400: errors.MalformedJsonError,
    401: errors.UnauthorizedError,
    403: errors.ForbiddenError,
    404: errors.JobNotFoundError,
    408: errors.RequestTimeoutError,
    409: errors.JobStateConflictError,
    410: errors.ResultExpiredError,
    413: errors.PayloadTooLargeError,
    415: errors.UnsupportedMediaTypeError,
    422: errors.InvalidRequestError,
    429: errors.TooManyWatchersError,
    431: errors.HeadersTooLargeError,
    503: errors.WatchersExhaustedError,
}

# (operationId, status) -> the problem that operation answers with that status.
_BY_OPERATION: dict[tuple[str, int], type[errors.ApiError]] = {
    ("jobs-create", 409): errors.IdempotencyKeyInFlightError,
    ("jobs-batch", 409): errors.IdempotencyKeyInFlightError,
    ("jobs-create", 422): errors.InvalidInputError,
    ("jobs-batch", 413): errors.BatchTooLargeError,
    ("jobs-create", 429): errors.TooManyActiveJobsError,
    ("jobs-batch", 429): errors.TooManyActiveJobsError,
    ("jobs-create", 503): errors.QueueBackedUpError,
    ("jobs-batch", 503): errors.QueueBackedUpError,
    ("jobs-get", 503): errors.DatabaseUnavailableError,
    ("jobs-cancel", 409): errors.CancelTooLateError,
    ("results-get", 409): errors.ResultNotReadyError,
    ("results-download", 403): errors.BadDownloadSignatureError,
    ("results-download", 410): errors.DownloadGoneError,
    ("reviews-create", 409): errors.NotAwaitingReviewError,
    ("reviews-create", 403): errors.FourEyesError,
    ("signals-create", 409): errors.NotAwaitingSignalError,
    ("schedules-create", 409): errors.TooManySchedulesError,
    ("health-readyz", 503): errors.NotReadyError,
}

_DETAILS: dict[type[errors.ApiError], str] = {
    errors.MalformedJsonError: "Expecting ',' delimiter: line 1 column 24 (char 23)",
    errors.UnauthorizedError: "Send the key as Authorization: Bearer <key>",
    errors.JobNotFoundError: "No job 0190a5c4-6f0e-7a3b-9c1d-2e3f4a5b6c7d",
    errors.ScheduleNotFoundError: "No schedule 0190a5c4-6f0e-7a3b-9c1d-2e3f4a5b6c7d",
    errors.WebhookNotFoundError: "No webhook endpoint 0190a5c4-6f0e-7a3b-9c1d-2e3f4a5b6c7d",
    errors.TooManyActiveJobsError: "1000 unfinished jobs for this owner (limit 1000)",
    errors.QueueBackedUpError: "The oldest queued job waits 312 s (limit 300 s)",
    errors.TooManyWatchersError: "This key holds 50 long-polls and event streams (limit 50)",
    errors.BatchTooLargeError: "1200 jobs in one batch (limit 1000)",
}

# Extension members a problem type carries (JobStateProblem, ValidationProblem, ...).
_EXTENSIONS: dict[type[errors.ApiError], dict[str, Any]] = {
    errors.JobStateConflictError: {"state": "running", "delivery": "none"},
    errors.CancelTooLateError: {"state": "succeeded", "delivery": "available"},
    errors.ResultNotReadyError: {"state": "running", "delivery": "none"},
    errors.NotAwaitingReviewError: {"state": "queued", "delivery": "none"},
    errors.NotAwaitingSignalError: {"state": "running", "delivery": "none"},
    errors.BatchTooLargeError: {"max_jobs": 1000},
    errors.InvalidInputError: {
        "errors": [
            {
                "loc": ["body", "input", "pages"],
                "msg": "List should have at most 2 items after validation, not 3",
                "type": "too_long",
            }
        ]
    },
    errors.InvalidRequestError: {
        "errors": [
            {
                "loc": ["query", "limit"],
                "msg": "Input should be less than or equal to 100",
                "type": "less_than_equal",
            }
        ]
    },
}


def _chosen(operation_id: str, path: str, status: int) -> type[errors.ApiError] | None:
    found = _BY_OPERATION.get((operation_id, status))
    if found is not None:
        return found
    if status == 404 and "{schedule_id}" in path:
        return errors.ScheduleNotFoundError
    if status == 404 and "{webhook_id}" in path:
        return errors.WebhookNotFoundError
    return _BY_STATUS.get(status)


def problem_example(operation_id: str, path: str, status: int) -> dict[str, Any] | None:
    """The example problem of ``status`` for the operation at ``path`` (``None`` for a
    status no error class answers)."""
    chosen = _chosen(operation_id, path, status)
    if chosen is None:
        return None
    return {
        "type": chosen.type_uri(),
        "title": chosen.title,
        "status": status,
        "detail": _DETAILS.get(chosen, chosen.title),
        **_EXTENSIONS.get(chosen, {}),
    }


__all__ = ["problem_example"]
