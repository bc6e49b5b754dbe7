"""The API's error tree and its one translation to RFC 9457 problem details.

Routers raise an :class:`ApiError` subclass; :func:`problem_response` is the only code
that turns an error into an HTTP answer (``application/problem+json``). Each case has
its own ``type`` URI so clients branch on the type, never on the human text.
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response

from atlas_jobs._app.api.paths import allowed_methods
from atlas_jobs._app.db.outages import database_unavailable
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState, Reason, TransitionName
from atlas_jobs._app.services import refusals
from atlas_jobs._app.services.refusals import clean_validation_errors
from atlas_jobs._app.services.schemas import ReviewDecision
from atlas_jobs._app.transitions import RejectReason

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_BASE = "urn:atlas-jobs:problem:"

log = structlog.get_logger("atlas.api")

LOG_CONTEXT_KEY = "atlas.log_context"
"""Scope key under which the request middleware leaves its log context (request id,
job id, owner) for the unexpected-error handler, which runs after it."""


class ApiError(Exception):
    """Base of every error the API answers on purpose."""

    status: int = 500
    slug: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal server error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.headers = dict(headers or {})
        self.extensions = extensions

    @classmethod
    def type_uri(cls) -> str:
        return PROBLEM_BASE + cls.slug


class MalformedJsonError(ApiError):
    status, slug, title = 400, "malformed-json", "The request body is not valid JSON"


class MalformedRequestError(ApiError):
    """Not HTTP the server can read (RFC 9110/9112): a control character such as NUL in
    a header, a malformed ``Content-Length``. Answered by the server before any route."""

    status, slug, title = 400, "malformed-request", "The request is not valid HTTP/1.1"


class UnsupportedCharsetError(ApiError):
    """A JSON body that is not UTF-8 (RFC 8259 section 8.1): UTF-16 or UTF-32 text,
    with or without a byte order mark, or a ``charset`` other than UTF-8."""

    status, slug, title = 415, "unsupported-charset", "JSON bodies are UTF-8 (RFC 8259)"


class UnauthorizedError(ApiError):
    status, slug, title = 401, "unauthorized", "A valid API key is required"

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="atlas-jobs"'})


class ForbiddenError(ApiError):
    status, slug, title = 403, "forbidden", "This key lacks the role for this action"


class FourEyesError(ApiError):
    """Four-eyes reviews (ATLAS_REVIEW_FOUR_EYES): the approver submitted the job, or
    cannot be told apart from its submitter (a key without a holder)."""

    status, slug, title = 403, "four-eyes", "The job's submitter may not approve it"


class BadDownloadSignatureError(ApiError):
    status, slug, title = 403, "bad-download-signature", "The download link is invalid or expired"


class JobNotFoundError(ApiError):
    """Unknown job *or another owner's job*: the two are indistinguishable by design."""

    status, slug, title = 404, "job-not-found", "No such job"


class ScheduleNotFoundError(ApiError):
    """Unknown schedule *or another owner's*: indistinguishable, like jobs."""

    status, slug, title = 404, "schedule-not-found", "No such schedule"


class WebhookNotFoundError(ApiError):
    """Unknown webhook endpoint *or another owner's*: indistinguishable."""

    status, slug, title = 404, "webhook-not-found", "No such webhook endpoint"


class KindNotFoundError(ApiError):
    """A kind in a path (a pause) that neither the API nor a live worker knows."""

    status, slug, title = 404, "kind-not-found", "No such job kind"


class KindNotPausedError(ApiError):
    """A resume of a kind (or version) that no pause holds."""

    status, slug, title = 404, "kind-not-paused", "This kind (or version) is not paused"


class BulkOperationNotFoundError(ApiError):
    status, slug, title = 404, "bulk-operation-not-found", "No such bulk operation"


class BulkOperationEndedError(ApiError):
    """A cancel of a bulk operation that has ended (``state`` says how)."""

    status, slug, title = 409, "bulk-operation-ended", "The bulk operation has ended"


class RouteNotFoundError(ApiError):
    status, slug, title = 404, "not-found", "No such resource"


class MethodNotAllowedError(ApiError):
    status, slug, title = 405, "method-not-allowed", "Method not allowed on this resource"


class NotAcceptableError(ApiError):
    status, slug, title = 406, "not-acceptable", "No acceptable representation"


class JobStateConflictError(ApiError):
    """The job is not in a state that allows this action; the body names the state."""

    status, slug, title = 409, "job-state-conflict", "The job's state does not allow this"


class CancelTooLateError(JobStateConflictError):
    slug, title = "cancel-too-late", "The job already finished; the cancel lost"


class NotAwaitingReviewError(JobStateConflictError):
    slug, title = "not-awaiting-review", "The job is not waiting for review"


class ConflictingDecisionError(JobStateConflictError):
    slug, title = "conflicting-decision", "Another review decision already took effect"


class NotAwaitingSignalError(JobStateConflictError):
    slug, title = "not-awaiting-signal", "The job is not waiting for an external event"


class DecisionTooLateError(JobStateConflictError):
    slug, title = "decision-too-late", "The wait's deadline passed; the decision lost"


class TooManySchedulesError(ApiError):
    """The owner already has ``ATLAS_SCHEDULE_MAX_PER_OWNER`` schedules: delete one first."""

    status, slug, title = 409, "too-many-schedules", "The owner has as many schedules as allowed"


class ResultNotReadyError(ApiError):
    status, slug, title = 409, "result-not-ready", "The result is not available"


class IdempotencyKeyInFlightError(ApiError):
    status, slug, title = (
        409,
        "idempotency-key-in-flight",
        "A request with this Idempotency-Key is still being processed",
    )

    def __init__(self, retry_after: int = 1) -> None:
        super().__init__(headers={"Retry-After": str(retry_after)})


class ResultExpiredError(ApiError):
    status, slug, title = 410, "result-expired", "The result's retention passed"


class DownloadGoneError(ApiError):
    status, slug, title = 410, "download-gone", "The file is no longer available"


class RequestTimeoutError(ApiError):
    status, slug, title = 408, "request-timeout", "The request body did not arrive in time"


class PayloadTooLargeError(ApiError):
    status, slug, title = 413, "payload-too-large", "The request body is too large"


class BatchTooLargeError(ApiError):
    status, slug, title = 413, "batch-too-large", "The batch holds more jobs than allowed"

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(f"{count} jobs in one batch (limit {limit})", max_jobs=limit)


class HeadersTooLargeError(ApiError):
    status, slug, title = (
        431,
        "request-header-fields-too-large",
        "The request line and headers are too large",
    )


class UnsupportedMediaTypeError(ApiError):
    status, slug, title = 415, "unsupported-media-type", "Send the body as application/json"


class InvalidRequestError(ApiError):
    status, slug, title = 422, "invalid-request", "The request is invalid"


class UnknownKindError(ApiError):
    status, slug, title = 422, "unknown-kind", "No such job kind"


class InvalidInputError(ApiError):
    status, slug, title = 422, "invalid-input", "The input does not match the kind's schema"


class IdempotencyKeyReusedError(ApiError):
    status, slug, title = (
        422,
        "idempotency-key-reused",
        "This Idempotency-Key was used with a different request body",
    )


class HttpError(ApiError):
    """Any other HTTP error raised by the framework itself."""

    slug, title = "http-error", "HTTP error"

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class TooManyActiveJobsError(ApiError):
    status, slug, title = 429, "too-many-active-jobs", "Too many unfinished jobs for this owner"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)})


class QueueBackedUpError(ApiError):
    status, slug, title = 503, "queue-backed-up", "The queue is backed up; try again later"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)})


class TooManyWatchersError(ApiError):
    """This API key already holds its share of long-polls and event streams."""

    status, slug, title = (
        429,
        "too-many-watchers",
        "Too many open long-polls and event streams for this API key",
    )

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)})


class WatchersExhaustedError(ApiError):
    """The process holds as many long-polls and event streams as it serves."""

    status, slug, title = (
        503,
        "watchers-exhausted",
        "The server holds all the long-polls and event streams it serves; try again later",
    )

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)})


class NotReadyError(ApiError):
    status, slug, title = 503, "not-ready", "The service is not ready"


DATABASE_RETRY_AFTER_SECONDS = 2


class DatabaseUnavailableError(ApiError):
    """The database refused or dropped the connection (stopped, restarting, in
    recovery) or no pooled connection came free in time: nothing was committed for
    this request, so repeating it later is safe (creation is idempotent by key)."""

    status, slug, title = (
        503,
        "database-unavailable",
        "The database is unavailable; try again later",
    )

    def __init__(self, retry_after: int = DATABASE_RETRY_AFTER_SECONDS) -> None:
        super().__init__(headers={"Retry-After": str(retry_after)})


def move_problem(refused: refusals.MoveRefused) -> ApiError:
    """The problem of a job's action the lifecycle refused."""
    public = refused.public
    if public is None:
        return JobNotFoundError()
    facts: dict[str, Any] = {"state": public.state.value, "delivery": public.delivery.state.value}
    name = refused.transition
    if name == TransitionName.REQUEST_CANCEL and refused.current in TERMINAL_STATES:
        return CancelTooLateError(
            f"The job is already {public.state.value}",
            job=public.model_dump(mode="json"),
            **facts,
        )
    if name == TransitionName.REQUEST_CANCEL:
        return JobStateConflictError(
            f"A {public.state.value} job is canceled by an operator decision", **facts
        )
    if name in {TransitionName.APPROVE, TransitionName.REJECT, TransitionName.RECEIVE_EVENT} and (
        public.reason in {Reason.DEADLINE_PASSED, Reason.DEADLINE_ESCALATED}
    ):
        return DecisionTooLateError(
            f"The wait's deadline passed first; the job is {public.state.value}", **facts
        )
    if refused.reason == RejectReason.CONFLICTING:
        recorded = "rejected" if name == TransitionName.APPROVE else "approved"
        return ConflictingDecisionError(
            f"The job was {recorded} before; it is {public.state.value}",
            decision=ReviewDecision.REJECT
            if name == TransitionName.APPROVE
            else ReviewDecision.APPROVE,
            **facts,
        )
    if name == TransitionName.RESCHEDULE and refused.current == JobState.QUEUED:
        return JobStateConflictError(
            "The job's start deadline passed: it will not start, so it cannot be rescheduled",
            **facts,
        )
    if name == TransitionName.RESCHEDULE:
        return JobStateConflictError(
            f"Only a queued job can be rescheduled; the job is {public.state.value}", **facts
        )
    if name == TransitionName.RECEIVE_EVENT:
        return NotAwaitingSignalError(
            f"The job is {public.state.value} ({public.reason.value}), "
            "not waiting for an external event",
            **facts,
        )
    if name in {TransitionName.APPROVE, TransitionName.REJECT}:
        return NotAwaitingReviewError(
            f"The job is {public.state.value} ({public.reason.value}), not waiting for review",
            **facts,
        )
    return JobStateConflictError(f"Not allowed while the job is {public.state.value}", **facts)


def problem_of(refusal: refusals.Refusal) -> ApiError:
    """The one mapping of a service's refusal to its problem."""
    match refusal:
        case refusals.JobNotFound():
            return JobNotFoundError()
        case refusals.MoveRefused():
            return move_problem(refusal)
        case refusals.FourEyesRefused(holder=holder, holder_required=True):
            return FourEyesError("Four-eyes reviews: approve with a key that names its holder")
        case refusals.FourEyesRefused(holder=holder):
            return FourEyesError(
                "Four-eyes reviews: the job was submitted by "
                + (f"holder {holder!r}" if holder else "this key")
                + "; another holder must approve it"
            )
        case refusals.NotAllowed(detail=detail):
            return ForbiddenError(detail)
        case refusals.WebhookNotFound():
            return WebhookNotFoundError()
        case refusals.ScheduleNotFound():
            return ScheduleNotFoundError()
        case refusals.TooManySchedules(owner=owner, count=count, limit=limit):
            return TooManySchedulesError(
                f"{owner} has {count} schedules (limit {limit}); delete one first", limit=limit
            )
        case refusals.BulkOperationNotFound():
            return BulkOperationNotFoundError()
        case refusals.BulkOperationEnded(state=state):
            return BulkOperationEndedError(f"The bulk operation has ended: {state}", state=state)
        case refusals.BadDownloadLink(detail=detail):
            return BadDownloadSignatureError(detail)
        case refusals.DownloadGone(detail=detail):
            return DownloadGoneError(detail)
        case refusals.ResultExpired(state=state, delivery=delivery):
            return ResultExpiredError(
                "The result's retention passed; the job is still succeeded",
                state=state,
                delivery=delivery,
            )
        case refusals.ResultNotReady(state=state, delivery=delivery):
            return ResultNotReadyError(
                f"The job is {state} with delivery {delivery}", state=state, delivery=delivery
            )
        case refusals.UnknownKind(known=known):
            return UnknownKindError(f"Unknown kind; known kinds: {', '.join(sorted(known))}")
        case refusals.KindNotFound(kind=kind, known=known):
            return KindNotFoundError(
                f"Unknown kind {kind!r}; known kinds: {', '.join(sorted(known))}", kind=kind
            )
        case refusals.KindNotPaused(kind=kind, version=version):
            which = kind if version is None else f"{kind}@{version}"
            return KindNotPausedError(f"{which} is not paused", kind=kind, version=version)
        case refusals.InvalidInput(errors=errors):
            return InvalidInputError(errors=errors)
        case refusals.InvalidRequest(detail=detail, errors=errors):
            if not errors:
                return InvalidRequestError(detail)
            return InvalidRequestError(detail, errors=errors)
        case refusals.BatchTooLarge(count=count, limit=limit):
            return BatchTooLargeError(count, limit)
        case refusals.KeyInFlight(retry_after=retry_after):
            return IdempotencyKeyInFlightError(retry_after=retry_after)
        case refusals.KeyReused(loc=loc):
            return IdempotencyKeyReusedError(
                errors=[{"loc": loc, "msg": "key used with another body", "type": "key_reused"}]
            )
        case refusals.AtCapacity(unfinished=unfinished, adding=adding, limit=limit):
            asked = "" if adding == 1 else f", {adding} more asked"
            return TooManyActiveJobsError(
                f"{unfinished} unfinished jobs{asked} (limit {limit}); wait for some to finish",
                retry_after=refusal.retry_after,
            )
        case refusals.QueueBackedUp(oldest_seconds=oldest, limit_seconds=limit):
            return QueueBackedUpError(
                f"the oldest claimable job has waited {oldest:.0f} s (limit {limit:.0f} s)",
                retry_after=refusal.retry_after,
            )
        case refusals.TooManyWatchers(detail=detail, retry_after=retry_after):
            return TooManyWatchersError(detail, retry_after=retry_after)
        case refusals.WatchersExhausted(detail=detail, retry_after=retry_after):
            return WatchersExhaustedError(detail, retry_after=retry_after)
        case refusals.DatabaseUnavailable():
            return DatabaseUnavailableError()
    raise AssertionError(f"no problem for {type(refusal).__name__}")  # pragma: no cover


def problem_type_uris() -> list[str]:
    """Every problem ``type`` the API can answer (one per :class:`ApiError` class), for
    the OpenAPI enum ``ProblemType``."""
    found: set[str] = set()
    pending: list[type[ApiError]] = [ApiError]
    while pending:
        cls = pending.pop()
        found.add(cls.type_uri())
        pending.extend(cls.__subclasses__())
    return sorted(found)


def problem_body(error: ApiError) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": error.type_uri(),
        "title": error.title,
        "status": error.status,
        "detail": error.detail,
    }
    body.update(error.extensions)
    return body


def problem_response(error: ApiError) -> Response:
    """The one place an error becomes an HTTP response. (No ``instance`` member: a
    download path holds its signed token, and echoing paths adds nothing.)"""
    return JSONResponse(
        problem_body(error),
        status_code=error.status,
        headers=error.headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def field_location(loc: Sequence[Any]) -> tuple[Any, ...]:
    """Where a field is in the request body, without the kind tag pydantic adds for the
    discriminated union: ``body.input.pages``, ``body.jobs.3.input.pages``,
    ``body.job.priority``."""
    parts = tuple(loc)
    tag_at = 1 if parts[:1] == ("body",) else None
    if parts[:2] == ("body", "jobs") and len(parts) > 3 and isinstance(parts[2], int):
        tag_at = 3
    if parts[:2] == ("body", "job"):  # a schedule's job template
        tag_at = 2
    if tag_at is not None and len(parts) > tag_at and parts[tag_at] in KINDS:
        return parts[:tag_at] + parts[tag_at + 1 :]
    return parts


def in_job_input(loc: Sequence[Any]) -> bool:
    """A location inside a job's ``input`` (one job, or an item of a batch)."""
    parts = tuple(loc)
    return (len(parts) > 2 and parts[:2] == ("body", "input")) or (
        len(parts) > 4 and parts[:2] == ("body", "jobs") and parts[3] == "input"
    )


def _from_validation(exc: RequestValidationError) -> ApiError:
    errors = [{**e, "loc": field_location(e.get("loc", ()))} for e in exc.errors()]
    if any(e.get("type") == "json_invalid" for e in errors):
        return MalformedJsonError()
    if any(e.get("type") == "union_tag_invalid" for e in errors):
        return UnknownKindError("Unknown kind", errors=clean_validation_errors(errors))
    body_input = [e for e in errors if e["loc"][:1] == ("body",)]
    if body_input and all(in_job_input(e["loc"]) for e in body_input):
        return InvalidInputError(errors=clean_validation_errors(errors))
    return InvalidRequestError(
        "The request does not match the API schema", errors=clean_validation_errors(errors)
    )


def _from_http(exc: StarletteHTTPException) -> ApiError:
    headers = dict(exc.headers or {})
    mapping: dict[int, type[ApiError]] = {
        404: RouteNotFoundError,
        405: MethodNotAllowedError,
        406: NotAcceptableError,
        413: PayloadTooLargeError,
        415: UnsupportedMediaTypeError,
        400: MalformedJsonError,
    }
    error_type = mapping.get(exc.status_code)
    error = HttpError(exc.status_code, str(exc.detail)) if error_type is None else error_type()
    error.headers.update(headers)
    return error


def unexpected_error_fields(exc: BaseException) -> dict[str, Any]:
    """What an unexpected error may put in a log line: its class, the database's error
    class and SQLSTATE, and where it was raised (file, line, function) -- never its
    message or a traceback's text, which can quote SQL parameters, a constraint's
    ``DETAIL`` (the key values), job input or an Idempotency-Key. The request id and
    the job id come from the log context."""
    fields: dict[str, Any] = {"error_type": type(exc).__name__}
    original = getattr(exc, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's
    cause = getattr(original, "__cause__", None) or original
    if cause is None and getattr(exc, "sqlstate", None):
        cause = exc  # the driver's own error: a statement sent past SQLAlchemy
    if cause is not None:
        fields["db_error_type"] = type(cause).__name__
        sqlstate = getattr(cause, "sqlstate", None) or getattr(original, "pgcode", None)
        if sqlstate:
            fields["sqlstate"] = str(sqlstate)
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames[:-1] if "/app/" in f.filename or "/workers/" in f.filename]
    fields["where"] = [
        f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}:{f.name}" for f in [*ours[-6:], *frames[-1:]]
    ]
    return fields


PageForError = Callable[[Request, ApiError], Response | None]
"""An HTML answer for an error on some paths (the status page's), else ``None``."""

UnexpectedErrorHandler = Callable[[Request, Exception], Awaitable[Response]]
"""The answer to an exception no route or error class expected (503 for an outage,
500 for a bug): what :func:`install_error_handlers` returns."""


def install_error_handlers(
    app: FastAPI, *, page_for: PageForError | None = None
) -> UnexpectedErrorHandler:
    """Register the translations of the error tree, and return the one for unexpected
    errors: the app answers them inside its request-context middleware
    (:class:`atlas_jobs._app.api.middleware.AnswerUnexpectedErrors`), so the access log, the request
    metrics and ``X-Request-ID`` see the status the client gets. It is also Starlette's
    last-resort handler (``ServerErrorMiddleware``) for an error outside that."""

    def respond(request: Request, error: ApiError) -> Response:
        page = page_for(request, error) if page_for is not None else None
        return page if page is not None else problem_response(error)

    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return respond(request, exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return respond(request, _from_validation(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        error = _from_http(exc)
        if exc.status_code == 405:
            # The router only knows the first route matching the path; the document
            # knows every method of the resource.
            allowed = allowed_methods(request.url.path, request.app.openapi().get("paths", {}))
            if allowed:
                error.headers["Allow"] = ", ".join(allowed)
        return respond(request, error)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        context = dict(request.scope.get(LOG_CONTEXT_KEY) or {})
        if database_unavailable(exc):  # an outage, not a bug: 503 + Retry-After
            log.warning("database_unavailable", **{**context, **unexpected_error_fields(exc)})
            return respond(request, DatabaseUnavailableError())
        log.error("unhandled_error", **{**context, **unexpected_error_fields(exc)})
        return respond(request, ApiError())

    async def on_refusal(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, refusals.Refusal)
        return respond(request, problem_of(exc))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(refusals.Refusal, on_refusal)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
    return on_unexpected
