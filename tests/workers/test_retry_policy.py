"""Backoff with full jitter and the one retry budget rule (pure functions)."""

from __future__ import annotations

import random

import pytest

from atlas_jobs._app.lifecycle import Reason, budget_verdict
from atlas_jobs._workers.errors import PermanentError, RecoverableError
from atlas_jobs._workers.retry import backoff_seconds, kind_backoff


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 0.5), (2, 1.0), (3, 2.0), (10, 30.0)])
def test_backoff_is_full_jitter_under_an_exponential_ceiling(attempt: int, ceiling: float) -> None:
    rng = random.Random(attempt)
    delays = [backoff_seconds(attempt, base=0.5, cap=30.0, rng=rng) for _ in range(200)]
    assert all(0.0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.8  # spread over the whole range, not clustered
    assert min(delays) < ceiling * 0.2


def test_retry_while_attempts_and_time_are_left() -> None:
    verdict = budget_verdict(
        charged_attempts=1,
        max_attempts=5,
        elapsed_seconds=1.0,
        max_elapsed_seconds=3600,
        delay_seconds=kind_backoff("atlas.bundle", 1),
    )
    assert verdict is None
    assert 0.0 <= kind_backoff("atlas.bundle", 1) <= 0.5


def test_give_up_when_attempts_are_exhausted() -> None:
    verdict = budget_verdict(
        charged_attempts=5, max_attempts=5, elapsed_seconds=1.0, max_elapsed_seconds=3600
    )
    assert verdict == Reason.RETRIES_EXHAUSTED


def test_give_up_when_the_next_attempt_would_start_past_the_elapsed_budget() -> None:
    assert (
        budget_verdict(
            charged_attempts=1, max_attempts=5, elapsed_seconds=3600, max_elapsed_seconds=3600
        )
        == Reason.TIME_EXHAUSTED
    )
    # the backoff counts: the next attempt must be able to start inside the budget
    assert (
        budget_verdict(
            charged_attempts=1,
            max_attempts=5,
            elapsed_seconds=3590,
            max_elapsed_seconds=3600,
            delay_seconds=10,
        )
        == Reason.TIME_EXHAUSTED
    )
    assert (
        budget_verdict(
            charged_attempts=1,
            max_attempts=5,
            elapsed_seconds=3589,
            max_elapsed_seconds=3600,
            delay_seconds=10,
        )
        is None
    )


def test_error_documents_say_whether_retrying_helps() -> None:
    assert RecoverableError("flaky", "try later").as_doc() == {
        "code": "flaky",
        "message": "try later",
        "retryable": True,
    }
    assert PermanentError("bad", "never").as_doc()["retryable"] is False
