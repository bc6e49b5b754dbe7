"""When a job may start, as a creation asks for it: ``run_at`` or ``delay_seconds`` (not
before), ``start_by`` or ``start_within_seconds`` (the start deadline) -- checked
against each other and against now (:class:`InvalidRequest` naming the field: a 422),
before anything is stored; and a reschedule's body.

The database computes the moments themselves (a delay is added to its ``now()``):
the checks here only need to be right to the second, against this process's clock
moved by the service's clock offset (tests move it)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.services.refusals import InvalidRequest
from atlas_jobs._app.services.schemas import MAX_AHEAD_SECONDS, JobCreateBase, RescheduleCreate
from atlas_jobs._app.transitions import Rejected

_AHEAD = timedelta(seconds=MAX_AHEAD_SECONDS)


@dataclass(frozen=True, slots=True)
class Timing:
    """The creation's timing fields as the creation statement binds them."""

    run_at: datetime | None = None
    run_after: float | None = None
    start_by: datetime | None = None
    start_within: float | None = None

    def fingerprinted(self) -> dict[str, Any]:
        """What the Idempotency-Key fingerprint covers: the fields as asked (a delay
        as its seconds, so a retried request is the same body), only those given."""
        found = {
            "run_at": _utc(self.run_at),
            "delay_seconds": self.run_after,
            "start_by": _utc(self.start_by),
            "start_within_seconds": self.start_within,
        }
        return {name: value for name, value in found.items() if value is not None}


def _utc(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat()


def _invalid(loc: tuple[str | int, ...], field: str, msg: str, kind: str) -> dict[str, Any]:
    return {"loc": [str(part) for part in (*loc, field)], "msg": msg, "type": kind}


def timing(body: JobCreateBase, loc: tuple[str | int, ...], clock: Clock) -> Timing:
    """The validated timing of one creation (``loc``: where its body is), or a 422."""
    now = datetime.now(UTC) + clock.offset
    errors: list[dict[str, Any]] = []
    for absolute, relative in (("run_at", "delay_seconds"), ("start_by", "start_within_seconds")):
        if getattr(body, absolute) is not None and getattr(body, relative) is not None:
            errors += [
                _invalid(loc, name, f"give {absolute} or {relative}, not both", "exclusive")
                for name in (absolute, relative)
            ]
    for name in ("run_at", "start_by"):
        at = getattr(body, name)
        if at is not None and at > now + _AHEAD:
            errors.append(_invalid(loc, name, "at most one year ahead", "too_far_ahead"))
    if errors:
        raise InvalidRequest("The job's timing is invalid", errors=errors)
    not_before = body.run_at or (
        None if body.delay_seconds is None else now + timedelta(seconds=body.delay_seconds)
    )
    deadline = body.start_by or (
        None
        if body.start_within_seconds is None
        else now + timedelta(seconds=body.start_within_seconds)
    )
    deadline_field = "start_by" if body.start_by is not None else "start_within_seconds"
    if body.start_by is not None and body.start_by <= now:
        errors.append(_invalid(loc, "start_by", "must be ahead of now", "in_the_past"))
    elif deadline is not None and not_before is not None and deadline <= not_before:
        errors.append(
            _invalid(loc, deadline_field, "must be after the job's run_at", "before_run_at")
        )
    if errors:
        raise InvalidRequest("The job's timing is invalid", errors=errors)
    return Timing(
        run_at=body.run_at,
        run_after=None if body.delay_seconds is None else float(body.delay_seconds),
        start_by=body.start_by,
        start_within=(
            None if body.start_within_seconds is None else float(body.start_within_seconds)
        ),
    )


def check_reschedule(body: RescheduleCreate, clock: Clock) -> None:
    """A reschedule's body: ``run_at`` or ``delay_seconds``, not both; ``run_at`` at
    most one year ahead (422 naming the field)."""
    loc = ("body",)
    errors: list[dict[str, Any]] = []
    if body.run_at is not None and body.delay_seconds is not None:
        errors += [
            _invalid(loc, name, "give run_at or delay_seconds, not both", "exclusive")
            for name in ("run_at", "delay_seconds")
        ]
    elif body.run_at is not None and body.run_at > datetime.now(UTC) + clock.offset + _AHEAD:
        errors.append(_invalid(loc, "run_at", "at most one year ahead", "too_far_ahead"))
    if errors:
        raise InvalidRequest("The new run_at is invalid", errors=errors)


def after_start_by_refusal(body: RescheduleCreate, refused: Rejected) -> InvalidRequest:
    """The refusal (422) of a reschedule whose new not-before is not before the job's
    ``start_by``, naming the field that asked for it."""
    field = "run_at" if body.run_at is not None else "delay_seconds"
    start_by = None if refused.job is None else refused.job.start_by
    detail = "The new not-before is not before the job's start_by"
    if start_by is not None:
        detail += f" ({start_by.astimezone(UTC).isoformat()})"
    return InvalidRequest(
        detail,
        errors=[_invalid(("body",), field, "must be before the job's start_by", "after_start_by")],
    )
