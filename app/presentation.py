"""Client presentation (docs/protocol.md §9.1): ONE function from (status, observation) to the
visible label and whether a result link is shown.

The label names the stage and its counts -- never a percentage or an ETA, because units
of different stages cost different amounts. Observation is the *client's* view of its
own reads: ``stale`` means "we could not read lately", never "the job failed".
Used by ``atlas-jobs watch`` and by any page that shows a job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final


class Observation(StrEnum):
    """How fresh the client's knowledge of the job is (client-side only)."""

    FRESH = "fresh"
    STALE = "stale"
    UNKNOWN = "unknown"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class Presentation:
    label: str
    show_result_link: bool


STALE_AFTER_SECONDS: Final = 10.0
"""A watcher with no successful read for this long shows ``stale``."""

# Stage name -> (verb, whether the unit is spoken). "Building tiles: 2 of 6" already
# names the unit in the verb; "Validating: 3 of 4 checks" names it after the counts.
_STAGE_WORDING: Final[Mapping[str, tuple[str, bool]]] = {
    "validate": ("Validating", True),
    "build": ("Building tiles", False),
    "package": ("Packaging", False),
}
_PUBLISH_STAGES: Final = frozenset({"publish", "publishing"})


def _stage_label(progress: Mapping[str, Any]) -> str:
    stage = progress.get("stage")
    if not stage:
        return "Starting"
    if stage in _PUBLISH_STAGES:
        return "Publishing"
    stages = {s["name"]: s for s in progress.get("stages", [])}
    verb, speak_unit = _STAGE_WORDING.get(stage, (str(stage).replace("_", " ").capitalize(), True))
    current = stages.get(stage)
    if current is None:
        return verb
    counts = f"{current['done']} of {current['total']}"
    if speak_unit:
        counts += f" {current['unit']}"
    label = f"{verb}: {counts}"
    if stage == "build" and int(progress.get("plan_revision", 0)) > 1:
        label += "; plan expanded"
    return label


def _message(error: Mapping[str, Any] | None, fallback: str) -> str:
    if error and error.get("message"):
        return str(error["message"])
    return fallback


def _timestamp(value: Any) -> datetime | None:
    """An RFC 3339 time from the status JSON (or a datetime), else None."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def result_expired(status: Mapping[str, Any], now: datetime) -> bool:
    """The delivery is ``expired``, or ``expires_at`` has passed (retention holds at the
    boundary, whatever the sweeper has done yet)."""
    delivery = status.get("delivery") or {}
    if delivery.get("state") == "expired":
        return True
    expires_at = _timestamp(delivery.get("expires_at"))
    return expires_at is not None and now >= expires_at


def _queued_label(status: Mapping[str, Any], now: datetime) -> str:
    reason = status.get("reason")
    if reason == "retry":
        cause = _message(status.get("last_error"), "")
        return (
            f"Queued; retrying after an error: {cause}"
            if cause
            else ("Queued; retrying after an error")
        )
    labels = {
        "resumed": "Queued; resumed by an operator",
        "review_approved": "Queued; review approved",
        "event_received": "Queued; the awaited event arrived",
    }
    label = labels.get(str(reason), "Queued")
    holding = _waiting_phrase(status.get("waiting_for"), now)
    return f"{label} — {holding}" if holding else label


def _moment(at: datetime, now: datetime) -> str:
    """A UTC time of day, with its date unless it is today's: "09:00 UTC"."""
    at = at.astimezone(UTC)
    return (
        f"{at:%H:%M} UTC" if at.date() == now.astimezone(UTC).date() else f"{at:%Y-%m-%d %H:%M} UTC"
    )


def paused_phrase(by: str, at: datetime | str | None, note: str | None) -> str:
    """A pause as words: "paused by operator:ops at 2026-12-02 06:10 UTC: destination
    down" (no note: no colon after the time)."""
    when = _timestamp(at)
    shown = when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if when else "an unknown time"
    phrase = f"paused by {by} at {shown}"
    return f"{phrase}: {note}" if note else phrase


def _waiting_phrase(waiting: Any, now: datetime) -> str | None:
    """What holds a queued job (``waiting_for``), as words: "scheduled for 09:00 UTC",
    "no worker serves thumbnail.render@2", "paused by operator:ops at ...: note"; for a
    reason this client does not know, the server's message (e.g. "waiting for a slot in
    press (3 of 3 busy)"). A ``run_at`` that passed since the read holds nothing."""
    if not isinstance(waiting, Mapping):
        return None
    reason = waiting.get("reason")
    if reason == "scheduled":
        run_at = _timestamp(waiting.get("run_at"))
        if run_at is None:
            return "scheduled"
        return None if run_at <= now else f"scheduled for {_moment(run_at, now)}"
    if reason == "start_deadline_passed":
        return "not started by its start deadline; it will not run"
    if reason == "no_worker":
        return f"no worker serves {waiting.get('kind')}"
    if waiting.get("reason") == "paused":
        return paused_phrase(str(waiting.get("by")), waiting.get("at"), waiting.get("note"))
    if reason == "concurrency":
        limit, running = waiting.get("limit"), waiting.get("running")
        busy = f" ({running} of {limit} busy)" if limit is not None else " (no start left)"
        return f"waiting for a slot in {waiting.get('key')}{busy}"
    if reason == "rate":
        per = waiting.get("per_seconds")
        period = f"{per:g}" if isinstance(per, (int, float)) else str(per)
        return (
            f"waiting for a start in {waiting.get('key')} ({waiting.get('starts')} per {period} s)"
        )
    if reason == "fair_share":
        ahead = waiting.get("ahead_of_you")
        return f"other owners' turn first (about {ahead} ahead)"
    if reason == "backlog":
        age = waiting.get("queue_age_seconds")
        return "behind older jobs" + (
            f" (the oldest has waited {round(age)} s)" if isinstance(age, (int, float)) else ""
        )
    message = waiting.get("message")
    return str(message) if message else None


def finished_without_files(destination: str | None, receipt: Mapping[str, Any] | None) -> str:
    """The label of a succeeded job whose result has no files: where it was published
    and the destination's receipt ("Finished — published to press, receipt R-12"), or
    "Finished (no files)" when it was not published (``destination`` ``None``).
    ``receipt`` is the destination's answer as the result reference holds it; a listing's
    row has only the status, which names the destination but not the receipt (``None``)."""
    if destination is None:
        return "Finished (no files)"
    where = f"Finished — published to {destination}"
    handle = next(
        (str(receipt[k]) for k in ("id", "receipt", "reference") if receipt and receipt.get(k)),
        None,
    )
    return f"{where}, receipt {handle}" if handle else where


def _published_label(result: Mapping[str, Any]) -> str:
    """The label of a result reference without files: its publication, if any."""
    publication = result.get("publication")
    if not isinstance(publication, Mapping):
        return finished_without_files(None, None)
    return finished_without_files(publication.get("destination"), publication.get("receipt"))


def attempt_line(status: Mapping[str, Any]) -> str:
    """The attempt count as people read it: "2 of 5" while retries may follow; once the
    job has failed, that no retry follows and why ("1 of 5; no retry follows: the error
    is permanent")."""
    attempt, most = status.get("attempt"), status.get("max_attempts")
    counted = f"{attempt} of {most}"
    if status.get("state") != "failed":
        return counted
    why = _NO_RETRY_BECAUSE.get(str(status.get("reason")), "the job failed")
    return f"{counted}; no retry follows: {why}"


# A failed job's reason -> why no retry follows it.
_NO_RETRY_BECAUSE: Final[Mapping[str, str]] = {
    "error": "the error is permanent",
    "review_rejected": "the review rejected it",
    "deadline_passed": "its deadline passed",
    "operator": "an operator failed it",
}


def present(
    status: Mapping[str, Any] | None,
    observation: Observation,
    *,
    seconds_since_read: float | None = None,
    now: datetime | None = None,
    result: Mapping[str, Any] | None = None,
) -> Presentation:
    """The visible label and link for a job status (the API's JSON) as observed.

    ``seconds_since_read`` is the age of the last successful read (for the stale label);
    ``now`` decides whether a published result has passed its ``expires_at`` (default:
    the wall clock); ``result`` is the job's result reference (``GET .../result``) when
    the caller has read it: a result without files then reads as finished with its
    reference, not as a download. Without it (a listing's row), the status's
    ``delivery.files`` and ``delivery.destination`` say the same, without the receipt.
    """
    if observation == Observation.STOPPED:
        return Presentation("Stopped watching; the job continues", False)
    if status is None or observation == Observation.UNKNOWN:
        return Presentation("Status unknown — connecting", False)
    if observation == Observation.STALE:
        age = int(seconds_since_read or STALE_AFTER_SECONDS)
        return Presentation(f"Last update {age} s ago — reconnecting", False)

    state = status.get("state")
    reason = status.get("reason")
    published = status.get("delivery") or {}
    delivery = published.get("state")
    if state == "queued":
        return Presentation(_queued_label(status, now or datetime.now(UTC)), False)
    if state == "running":
        return Presentation(_stage_label(status.get("progress") or {}), False)
    if state == "waiting":
        if reason == "review":
            return Presentation("Waiting for review", False)
        return Presentation("Waiting for an external event", False)
    if state == "unresolved":
        why = _message(status.get("last_error"), str(reason or "").replace("_", " "))
        return Presentation(f"Needs attention: {why}", False)
    if state == "cancel_requested":
        return Presentation("Cancellation requested", False)
    if state == "succeeded":
        if result_expired(status, now or datetime.now(UTC)):
            return Presentation("Finished; result expired", False)
        if delivery == "available":
            if result is not None and not result.get("files"):
                return Presentation(_published_label(result), False)
            if result is None and published.get("files") == 0:
                # A listing's row: the status says what the result holds, not its receipt.
                where = published.get("destination") or None
                return Presentation(finished_without_files(where, None), False)
            return Presentation("Ready — download", True)
        return Presentation("Finished", False)
    if state == "failed":
        return Presentation(f"Failed: {_message(status.get('error'), 'unknown error')}", False)
    if state == "canceled":
        return Presentation("Canceled", False)
    return Presentation(f"Unknown state {state!r}", False)
