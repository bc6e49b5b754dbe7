"""docs/protocol.md §9.1: one function maps (status, observation) to label and link."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from atlas_jobs._app.presentation import Observation, present


def status(state: str, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "state": state,
        "reason": extra.pop("reason", "new"),
        "delivery": {"state": extra.pop("delivery", "none"), "expires_at": None},
        "progress": extra.pop("progress", {"stage": None, "plan_revision": 0, "stages": []}),
        "error": None,
        "last_error": None,
    }
    base.update(extra)
    return base


def running(stage: str, done: int, total: int, unit: str, revision: int = 1) -> dict[str, Any]:
    return status(
        "running",
        reason="claimed",
        progress={
            "stage": stage,
            "plan_revision": revision,
            "stages": [{"name": stage, "unit": unit, "done": done, "total": total}],
        },
    )


EXPANDED = "Building tiles: 2 of 6; plan expanded"
EXPIRED = "Finished; result expired"


@pytest.mark.parametrize(
    ("job", "label", "link"),
    [
        (status("queued"), "Queued", False),
        (running("validate", 3, 4, "checks"), "Validating: 3 of 4 checks", False),
        (running("build", 2, 6, "tiles", revision=2), EXPANDED, False),
        (running("build", 1, 4, "tiles"), "Building tiles: 1 of 4", False),
        (running("package", 2, 2, "actions"), "Packaging: 2 of 2", False),
        (running("publish", 0, 1, "steps"), "Publishing", False),
        (status("succeeded", reason="published", delivery="available"), "Ready — download", True),
        (status("succeeded", reason="published", delivery="expired"), EXPIRED, False),
        (
            status("failed", reason="error", delivery="blocked",
                   error={"code": "x", "message": "summary-source cannot be built"}),
            "Failed: summary-source cannot be built",
            False,
        ),
        (status("cancel_requested", reason="cancel_requested"), "Cancellation requested", False),
        (status("canceled", reason="canceled"), "Canceled", False),
        (status("waiting", reason="review"), "Waiting for review", False),
        (
            status("unresolved", reason="retries_exhausted",
                   last_error={"code": "flaky", "message": "tile service timed out"}),
            "Needs attention: tile service timed out",
            False,
        ),
    ],
)  # fmt: skip
def test_fresh_labels(job: dict[str, Any], label: str, link: bool) -> None:
    shown = present(job, Observation.FRESH)
    assert (shown.label, shown.show_result_link) == (label, link)
    assert "%" not in shown.label


def test_stale_is_never_failed_and_hides_the_link() -> None:
    ready = status("succeeded", reason="published", delivery="available")
    shown = present(ready, Observation.STALE, seconds_since_read=12)
    assert shown.label == "Last update 12 s ago — reconnecting"
    assert not shown.show_result_link
    assert "ail" not in shown.label


def test_stopped_and_unknown() -> None:
    assert present(status("running"), Observation.STOPPED).label == (
        "Stopped watching; the job continues"
    )
    assert present(None, Observation.UNKNOWN).show_result_link is False


def test_retry_label_names_the_cause() -> None:
    retrying = status(
        "queued",
        reason="retry",
        last_error={"code": "flaky", "message": "tile service timed out", "retryable": True},
    )
    shown = present(retrying, Observation.FRESH)
    assert shown.label == "Queued; retrying after an error: tile service timed out"


def test_expiry_is_decided_from_expires_at_as_well() -> None:
    """Retention holds at the boundary: a result past ``expires_at`` reads expired even
    while the delivery still says ``available`` (the sweeper has not passed yet)."""
    boundary = datetime(2026, 1, 1, 12, 0, 14, tzinfo=UTC)
    ready = status("succeeded", reason="published", delivery="available")
    ready["delivery"]["expires_at"] = boundary.isoformat().replace("+00:00", "Z")
    before = present(ready, Observation.FRESH, now=boundary - timedelta(seconds=1))
    at = present(ready, Observation.FRESH, now=boundary)
    assert (before.label, before.show_result_link) == ("Ready — download", True)
    assert (at.label, at.show_result_link) == (EXPIRED, False)
