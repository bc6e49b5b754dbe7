"""The reconnect pause of ``atlas_jobs._app.db.listen``: doubling, capped, jittered within bounds."""

from __future__ import annotations

from atlas_jobs._app.db.listen import Backoff


def test_the_bound_doubles_from_the_initial_pause_up_to_the_cap() -> None:
    backoff = Backoff(initial_seconds=0.2, max_seconds=5.0)
    assert [backoff.bound(n) for n in range(1, 8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert backoff.bound(10_000) == 5.0


def test_every_pause_lies_in_the_upper_half_of_its_bound() -> None:
    backoff = Backoff(initial_seconds=0.2, max_seconds=5.0)
    for failures in range(1, 12):
        bound = backoff.bound(failures)
        pauses = [backoff.delay(failures) for _ in range(200)]
        assert all(bound / 2 <= pause <= bound for pause in pauses)
        assert len(set(pauses)) > 1, "jittered"
