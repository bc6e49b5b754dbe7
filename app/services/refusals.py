"""What a service refuses, as typed values: the API layer turns each into its RFC 9457
problem in ONE place (``atlas_jobs._app.api.problems.problem_of``); nothing here knows
HTTP.

A refusal is an exception so that a service can stop anywhere inside its transaction
(which then rolls back); the creation service returns the refusals of a creation as its
outcome, after the rollback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from atlas_jobs._app.db.records import JobRow
    from atlas_jobs._app.lifecycle import JobState
    from atlas_jobs._app.services.schemas import JobPublic
    from atlas_jobs._app.transitions import RejectReason


def clean_validation_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Validation errors without the offending input values (which may hold secrets)."""
    cleaned: list[dict[str, Any]] = []
    for error in errors:
        cleaned.append(
            {
                "loc": [str(part) for part in error.get("loc", ())],
                "msg": str(error.get("msg", "")),
                "type": str(error.get("type", "")),
            }
        )
    return cleaned


class Refusal(Exception):  # noqa: N818 - a refusal, not a failure
    """Base of every refusal a service answers on purpose."""


@dataclass(eq=False)
class JobNotFound(Refusal):
    """No such job -- or another owner's, which is answered the same way."""


@dataclass(eq=False)
class MoveRefused(Refusal):
    """A job's action the lifecycle refused: ``transition`` asked of a job in state
    ``current`` (``job``: its row, ``public``: its status now; both ``None`` when there
    is no such job, or it is another owner's)."""

    transition: str
    reason: RejectReason
    current: JobState | None = None
    job: JobRow | None = None
    public: JobPublic | None = None


@dataclass(eq=False)
class FourEyesRefused(Refusal):
    """Four-eyes reviews: an approval by the holder (or key) that submitted the job
    (``holder``), or by a key naming no holder (``holder_required``)."""

    holder: str | None
    holder_required: bool = False


@dataclass(eq=False)
class NotAllowed(Refusal):
    """The caller's role does not allow this action (``detail`` says what it needs)."""

    detail: str


@dataclass(eq=False)
class WebhookNotFound(Refusal):
    """No such webhook endpoint -- or another owner's, answered the same way."""


@dataclass(eq=False)
class ScheduleNotFound(Refusal):
    """No such schedule -- or another owner's, answered the same way."""


@dataclass(eq=False)
class TooManySchedules(Refusal):
    """The owner already has as many schedules as allowed."""

    owner: str
    count: int
    limit: int | None


@dataclass(eq=False)
class BulkOperationNotFound(Refusal):
    """No such bulk operation."""


@dataclass(eq=False)
class BulkOperationEnded(Refusal):
    """A cancel of a bulk operation that has ended (``state`` says how)."""

    state: str


@dataclass(eq=False)
class BadDownloadLink(Refusal):
    """The signed download link's signature is bad, or the link expired (``detail``:
    what to do; ``None``: nothing to say beyond that)."""

    detail: str | None = None


@dataclass(eq=False)
class DownloadGone(Refusal):
    """The signed download's job or file is no longer available (``detail`` says which)."""

    detail: str


@dataclass(eq=False)
class ResultNotReady(Refusal):
    """The job's delivery is not ``available`` (yet, or any more but not expired)."""

    state: str
    delivery: str


@dataclass(eq=False)
class ResultExpired(Refusal):
    """The result's retention passed; the job is still ``succeeded``."""

    state: str
    delivery: str


@dataclass(eq=False)
class UnknownKind(Refusal):
    known: Sequence[str]


@dataclass(eq=False)
class KindNotFound(Refusal):
    """A kind named in a path (a pause) that neither the API nor a live worker knows."""

    kind: str
    known: Sequence[str]


@dataclass(eq=False)
class KindNotPaused(Refusal):
    """A resume of a kind (``version`` ``None``: its every-version pause) no pause holds."""

    kind: str
    version: int | None


@dataclass(eq=False)
class InvalidInput(Refusal):
    """The input does not match the kind's schema (``errors`` name the fields)."""

    errors: list[dict[str, Any]]


@dataclass(eq=False)
class InvalidRequest(Refusal):
    """The request asks for something it cannot (``errors`` name where)."""

    detail: str
    errors: list[dict[str, Any]] = field(default_factory=list)


@dataclass(eq=False)
class BatchTooLarge(Refusal):
    count: int
    limit: int


@dataclass(eq=False)
class KeyInFlight(Refusal):
    """Another request holding the same Idempotency-Key is still being processed."""

    retry_after: int = 1


@dataclass(eq=False)
class KeyReused(Refusal):
    """The Idempotency-Key was used before with another body (``loc`` names the key)."""

    loc: list[str]


@dataclass(eq=False)
class AtCapacity(Refusal):
    """The owner's unfinished jobs plus the ones asked for exceed the per-owner cap."""

    unfinished: int
    adding: int
    limit: int
    retry_after: int


@dataclass(eq=False)
class QueueBackedUp(Refusal):
    """The oldest claimable job has waited past the admission limit."""

    oldest_seconds: float
    limit_seconds: float
    retry_after: int


@dataclass(eq=False)
class TooManyWatchers(Refusal):
    """This API key holds its share of held reads and event streams."""

    detail: str
    retry_after: int


@dataclass(eq=False)
class WatchersExhausted(Refusal):
    """The process holds as many held reads and event streams as it serves."""

    detail: str
    retry_after: int


@dataclass(eq=False)
class DatabaseUnavailable(Refusal):
    """The database refused or dropped the connection: nothing was committed."""
