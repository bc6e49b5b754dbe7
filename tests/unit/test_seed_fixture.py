"""The seed case ``B62-14`` (tests/fixtures/B62-14-case.json) replayed through the one
presentation function and the client's observer, on a fake clock: every step of the
j-41..j-44 histories shows the expected label and link, and the t=7 -> t=22
observation gap turns *stale* after 10 s without a read -- never *failed* -- and shows
the job finished, with a link, at the first successful read."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from atlas_jobs._app.client import Observer
from atlas_jobs._app.presentation import Observation, present

CASE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "B62-14-case.json").read_text()
)
SUBMITTED = datetime(2026, 11, 29, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return SUBMITTED + timedelta(seconds=seconds)


def resolve(value: Any) -> Any:
    """``"T+74"`` -> the RFC 3339 time 74 s after submission, everywhere in a status."""
    if isinstance(value, str) and value.startswith("T+"):
        return at(float(value[2:])).isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: resolve(v) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v) for v in value]
    return value


def status_at(job: str, t: float) -> dict[str, Any]:
    """The job's status as the server would answer at ``t`` (the latest step before)."""
    steps = [s for s in CASE["histories"][job]["steps"] if s["t"] <= t]
    result: dict[str, Any] = resolve(steps[-1]["status"])
    return result


STEPS = [
    pytest.param(job, step, id=f"{job}@t={step['t']}:{step['label']}")
    for job, history in CASE["histories"].items()
    for step in history["steps"]
]


@pytest.mark.parametrize(("job", "step"), STEPS)
def test_every_seed_step_shows_its_label_and_link(job: str, step: dict[str, Any]) -> None:
    shown = present(resolve(step["status"]), Observation.FRESH, now=at(step["t"]))
    assert (shown.label, shown.show_result_link) == (step["label"], step["link"])
    assert "%" not in shown.label


def test_the_case_covers_the_seed_outcomes() -> None:
    finals = {job: h["steps"][-1]["status"] for job, h in CASE["histories"].items()}
    assert finals["j-41"]["state"] == "succeeded"  # expiry does not change the state
    assert finals["j-42"]["state"] == "failed"
    assert finals["j-42"]["delivery"]["state"] == "blocked"
    assert finals["j-43"]["state"] == "canceled"
    assert finals["j-44"]["state"] == "succeeded"
    assert ("succeeded", "succeeded", "request_cancel") in {
        (h["from"], h["to"], h["transition"]) for h in CASE["histories"]["j-44"]["history"]
    }


def test_the_observation_gap_is_stale_never_failed() -> None:
    gap = CASE["observation_gap"]
    clock = {"now": 0.0}
    observer = Observer(lambda: clock["now"], stale_after=gap["stale_after_seconds"])
    expected = {e["t"]: e for e in gap["expect"]}
    seen: list[str] = []
    for t in range(0, gap["reads_succeed_again_at"] + 1, gap["read_every_seconds"]):
        clock["now"] = float(t)
        if gap["reads_fail_from"] <= t < gap["reads_succeed_again_at"]:
            observer.read_failed("ConnectError")
        else:
            observer.read_succeeded(status_at(gap["job"], t))
        shown = observer.view(now=at(t))
        seen.append(shown.label)
        if t in expected:
            want = expected[t]
            assert observer.observation() == Observation(want["observation"]), t
            assert (shown.label, shown.show_result_link) == (want["label"], want["link"]), t
    assert not any("fail" in label.lower() for label in seen)
