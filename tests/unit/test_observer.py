"""The client's observation of a job, on a fake clock: unknown before the first read,
stale after 10 s without a successful read (by its own timer), the last known status
kept through failed reads -- and never a job failure."""

from __future__ import annotations

from typing import Any

from atlas_jobs._app.client import Observer
from atlas_jobs._app.presentation import Observation


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


RUNNING: dict[str, Any] = {
    "state": "running",
    "reason": "claimed",
    "progress": {
        "stage": "build",
        "plan_revision": 2,
        "stages": [{"name": "build", "unit": "tiles", "done": 2, "total": 6}],
    },
    "delivery": {"state": "partial_private", "expires_at": None},
}


def test_unknown_before_the_first_read() -> None:
    observer = Observer(FakeClock())
    assert observer.observation() == Observation.UNKNOWN
    observer.read_failed("ConnectError")
    assert observer.observation() == Observation.UNKNOWN
    assert not observer.view().show_result_link


def test_stale_by_its_own_timer_and_the_status_is_kept() -> None:
    clock = FakeClock()
    observer = Observer(clock)
    observer.read_succeeded(RUNNING)
    assert observer.view().label == "Building tiles: 2 of 6; plan expanded"
    observer.read_failed("ReadTimeout")
    clock.now += 9.9  # failed reads alone do not make it stale: the timer does
    assert observer.observation() == Observation.FRESH
    assert observer.view().label == "Building tiles: 2 of 6; plan expanded"
    clock.now += 0.1
    assert observer.observation() == Observation.STALE
    assert observer.view().label == "Last update 10 s ago — reconnecting"
    clock.now += 5
    assert observer.view().label == "Last update 15 s ago — reconnecting"
    assert observer.status == RUNNING  # kept through the failures
    assert "fail" not in observer.view().label.lower()


def test_a_304_keeps_the_status_and_refreshes_the_observation() -> None:
    clock = FakeClock()
    observer = Observer(clock)
    observer.read_succeeded(RUNNING)
    clock.now += 30
    assert observer.observation() == Observation.STALE
    observer.read_succeeded(None)
    assert observer.observation() == Observation.FRESH
    assert observer.status == RUNNING


def test_stopped_watching_is_local() -> None:
    observer = Observer(FakeClock())
    observer.read_succeeded(RUNNING)
    observer.stop()
    assert observer.view().label == "Stopped watching; the job continues"
    assert observer.status == RUNNING
