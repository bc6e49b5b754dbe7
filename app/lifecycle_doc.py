"""``docs/lifecycle.md``, generated from the code so it cannot drift: the state x delivery
x observation matrix -- the label and link of :func:`atlas_jobs._app.presentation.present` and the
actions the transition table (:data:`atlas_jobs._app.lifecycle.TRANSITIONS`) allows -- and the
persistence / publication / cancellation boundary.

``python -m atlas_jobs._app.lifecycle_doc > docs/lifecycle.md`` (``make docs``) writes it; a test
fails when the committed file differs from :func:`render`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from atlas_jobs._app.lifecycle import (
    DELIVERY_DOCS,
    STATE_DOCS,
    STATE_REASONS,
    TERMINAL_STATES,
    TRANSITIONS,
    WAITING_DOCS,
    DeliveryState,
    Effect,
    Guard,
    JobState,
    WaitingReason,
)
from atlas_jobs._app.presentation import STALE_AFTER_SECONDS, Observation, present

PEOPLE: Final = ("client", "reviewer", "operator")
"""Actors who act from outside (workers and the system act on their own)."""

NOW: Final = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
PUBLISHED: Final = frozenset({DeliveryState.AVAILABLE, DeliveryState.EXPIRED})
PRIVATE: Final = (DeliveryState.NONE, DeliveryState.PARTIAL_PRIVATE, DeliveryState.STAGED_PRIVATE)


def deliveries(state: JobState) -> tuple[DeliveryState, ...]:
    """The delivery states a job in ``state`` can have (the database's CHECK rules:
    published only when succeeded, succeeded always published, blocked only when failed
    or canceled)."""
    if state == JobState.SUCCEEDED:
        return (DeliveryState.AVAILABLE, DeliveryState.EXPIRED)
    if state in {JobState.FAILED, JobState.CANCELED}:
        return (DeliveryState.NONE, DeliveryState.BLOCKED)
    return PRIVATE


GUARD_REASONS: Final = {Guard.AWAITING_REVIEW: "review", Guard.AWAITING_EVENT: "external"}
"""Guards that decide by the wait's reason (a review decides only a review wait)."""


def actions(state: JobState, reason: str, link: bool) -> list[str]:
    """What a person may do: local actions, the link, and server requests by role."""
    found: list[str] = []
    if link:
        found.append("download (any role of the owner)")
    for transition in TRANSITIONS.values():
        who = sorted(transition.actors & set(PEOPLE))
        wanted = GUARD_REASONS.get(transition.guard) if transition.guard else None
        if who and state in transition.moves and wanted in {None, reason}:
            found.append(f"{transition.name.value} ({', '.join(who)})")
    if state not in TERMINAL_STATES:
        found.append("stop waiting (local)")
    return found


def _example(state: JobState, reason: str, delivery: DeliveryState) -> dict[str, Any]:
    """A representative status: a stage under way while a worker holds the job, an
    error where the state carries one, and an expiry in the future."""
    held = state in {JobState.RUNNING, JobState.CANCEL_REQUESTED}
    stages = [{"name": "build", "unit": "tiles", "done": 2, "total": 6}] if held else []
    error = {"code": "example", "message": "<message>", "retryable": False}
    cause = {"code": "example", "message": "<cause>", "retryable": True}
    expires = NOW + timedelta(hours=1)
    return {
        "state": state.value,
        "reason": reason,
        "progress": {"stage": "build" if held else None, "plan_revision": 2, "stages": stages},
        "delivery": {
            "state": delivery.value,
            "expires_at": expires.isoformat() if delivery in PUBLISHED else None,
        },
        "error": error if state == JobState.FAILED else None,
        "last_error": cause if reason == "retry" or state == JobState.UNRESOLVED else None,
    }


def rows() -> Iterator[tuple[str, str, str, str, str, str]]:
    """(state, reason, delivery, label, link, actions) for every reachable combination."""
    for state in JobState:
        for reason in sorted(r.value for r in STATE_REASONS[state]):
            for delivery in deliveries(state):
                shown = present(_example(state, reason, delivery), Observation.FRESH, now=NOW)
                yield (
                    state.value,
                    reason,
                    delivery.value,
                    shown.label,
                    "yes" if shown.show_result_link else "no",
                    "; ".join(actions(state, reason, shown.show_result_link)) or "none",
                )


BOUNDARY: Final = """\
## The persistence, publication and cancellation boundary

* **Persistence.** `POST /v1/jobs` answers `202` only after the job row and its first
  history row are committed; a lost answer is recovered by repeating the request with the
  same `Idempotency-Key` (the client library does), never by creating another job.
* **Publication.** The worker locks the job row, moves the staged bundle into the owner's
  area and commits `succeeded` + `available` in one transaction, only while the job is
  `running` or `cancel_requested` and its attempt still holds the lease. Before that
  commit nothing is downloadable (`partial_private`, `staged_private`); after it the link
  appears.
* **Cancellation.** A cancel locks the same row first. On a job no worker holds it ends
  the job (`canceled`); on a running job it records `cancel_requested` and the worker
  stops at its next safe point; once publication has begun, publication wins
  (`cancel_requested -> succeeded`). A cancel that finds the job already ended another
  way answers `409` and is still recorded (`cancel_too_late`); a repeat of a cancel that
  took effect answers `202`. A client never sees both `canceled` and a result.
* **Retention.** From `delivery.expires_at` on, the result and its links answer `410` and
  the label reads "Finished; result expired" -- decided from `expires_at`, whatever the
  sweeper has done; the state stays `succeeded`.
"""


BUDGET: Final = """\
## Attempts and the retry budget

Every claim starts an attempt (`attempt` counts them all). The retry budget
(`budget_verdict`: the kind's `max_attempts`, and its elapsed-time budget since creation
or `resume`) counts only the attempts *charged*: an attempt that ends in an error, a lost
lease or an ending of the job. An attempt that reaches a business wait (a review gate or
an external event, `running -> waiting`) did its part and is not charged, as a graceful
shutdown's `release` is not: the wait is not a failed attempt, so a job that waited for
review still has all its attempts for the steps after it. The elapsed-time budget keeps
running through a wait: a kind with long waits declares a budget that covers them
(`document.publish`: the longest review deadline plus an hour). `resume` grants a new
budget (charged attempts and the clock restart).
"""


def budget_rows() -> Iterator[str]:
    """The transitions that end an attempt, and whether that attempt is charged."""
    for transition in TRANSITIONS.values():
        if transition.ends_attempt is None:
            continue
        charged = "no" if Effect.UNCHARGE in transition.effects else "yes"
        moves = ", ".join(
            f"`{source.value if source else '(none)'} -> {target.value}`"
            for source, target in transition.moves.items()
        )
        yield (
            f"| `{transition.name.value}` | {moves} | `{transition.ends_attempt.value}` "
            f"| {charged} |"
        )


def render() -> str:
    lines = [
        "# Lifecycle: what a person sees",
        "",
        "<!-- Generated by `python -m atlas_jobs._app.lifecycle_doc` (make docs) from",
        "     app/lifecycle.py and app/presentation.py; a test fails when this file drifts.",
        "     Do not edit. -->",
        "",
        "Labels come from one function,",
        "`atlas_jobs._app.presentation.present(status, observation)`; actions from the",
        "transition table (`atlas_jobs._app.lifecycle.TRANSITIONS`, by actor).",
        "Running examples show the build stage at 2 of 6 tiles, plan revision 2; `<cause>`",
        "and `<message>` stand for the recorded error. No label has a percentage or an ETA.",
        "",
        "## States and delivery",
        "",
        "| state | meaning |",
        "|---|---|",
        *(f"| `{s.value}` | {doc} |" for s, doc in STATE_DOCS.items()),
        "",
        "| delivery | meaning |",
        "|---|---|",
        *(f"| `{d.value}` | {doc} |" for d, doc in DELIVERY_DOCS.items()),
        "",
        "## Observation `fresh`: state x reason x delivery",
        "",
        "| state | reason | delivery | label | link | actions |",
        "|---|---|---|---|---|---|",
        *(
            f"| `{s}` | `{r}` | `{d}` | {label} | {link} | {acts} |"
            for s, r, d, label, link, acts in rows()
        ),
        "",
        "A published result past its `expires_at` (delivery still `available` until the "
        "sweeper runs) reads: "
        + present(
            _example(JobState.SUCCEEDED, "published", DeliveryState.AVAILABLE),
            Observation.FRESH,
            now=NOW + timedelta(hours=2),
        ).label
        + " (no link).",
        "",
        "A queued job whose `kind@version` no live worker serves (`waiting_for.reason` "
        "`no_worker`) reads: "
        + present(
            {
                **_example(JobState.QUEUED, "new", DeliveryState.NONE),
                "waiting_for": {
                    "reason": "no_worker",
                    "kind": "thumbnail.render@2",
                    "message": "no live worker serves thumbnail.render@2",
                },
            },
            Observation.FRESH,
            now=NOW,
        ).label
        + " -- the job stays queued until such a worker is live; it is never failed for it.",
        "",
        *_waiting_section(),
        "## The other observations (whatever the state)",
        "",
        "Observation belongs to the client: it says how fresh its knowledge is, never what",
        "happened to the job. The last known status is kept through failed reads.",
        "",
        "| observation | when | label | link |",
        "|---|---|---|---|",
    ]
    stale_after = int(STALE_AFTER_SECONDS)
    others = (
        (Observation.UNKNOWN, "before the first successful read", None),
        (Observation.STALE, f"{stale_after} s or more without a successful read", 12.0),
        (Observation.STOPPED, "the person stopped watching (Ctrl-C)", None),
    )
    for observation, when, age in others:
        shown = present(
            _example(JobState.RUNNING, "claimed", DeliveryState.NONE),
            observation,
            seconds_since_read=age,
        )
        link = "yes" if shown.show_result_link else "no"
        lines.append(f"| `{observation.value}` | {when} | {shown.label} | {link} |")
    lines += [
        "",
        BUDGET,
        "| transition | moves | attempt outcome | charged |",
        "|---|---|---|---|",
        *budget_rows(),
        "",
        BOUNDARY,
    ]
    return "\n".join(lines)


# One example of each reason a queued job waits for, as the status's ``waiting_for``.
_WAITING_EXAMPLES: Final[dict[WaitingReason, dict[str, Any]]] = {
    WaitingReason.SCHEDULED: {"run_at": (NOW + timedelta(hours=1)).isoformat()},
    WaitingReason.START_DEADLINE_PASSED: {"start_by": NOW.isoformat()},
    WaitingReason.NO_WORKER: {"kind": "thumbnail.render@2"},
    WaitingReason.PAUSED: {"by": "operator:ops", "at": NOW.isoformat(), "note": "CMS down"},
    WaitingReason.CONCURRENCY: {"key": "press", "limit": 3, "running": 3},
    WaitingReason.RATE: {"key": "api", "starts": 10, "per_seconds": 60.0},
    WaitingReason.FAIR_SHARE: {"ahead_of_you": 12, "estimate": True},
    WaitingReason.BACKLOG: {"queue_age_seconds": 42.0, "estimate": True},
}


def _waiting_section() -> list[str]:
    """Every ``waiting_for`` reason (the lifecycle's WAITING_DOCS) with its label."""
    lines = [
        "## Why a queued job waits (`waiting_for`)",
        "",
        "Computed when the status is read, never stored: a queued job stays `queued`.",
        "",
        "| reason | meaning | label |",
        "|---|---|---|",
    ]
    for reason, meaning in WAITING_DOCS.items():
        waiting = {"reason": reason.value, **_WAITING_EXAMPLES[reason]}
        status = {**_example(JobState.QUEUED, "new", DeliveryState.NONE), "waiting_for": waiting}
        label = present(status, Observation.FRESH, now=NOW).label
        lines.append(f"| `{reason.value}` | {meaning.replace('``', '`')} | {label} |")
    return [*lines, ""]


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
