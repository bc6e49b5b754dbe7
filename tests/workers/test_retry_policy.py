"""Backoff with full jitter and the retry budget (pure functions)."""

from __future__ import annotations

import random

import pytest

from app.lifecycle import Reason
from workers.errors import PermanentError, RecoverableError
from workers.retry import GiveUp, RetryLater, backoff_seconds, decide


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 0.5), (2, 1.0), (3, 2.0), (10, 30.0)])
def test_backoff_is_full_jitter_under_an_exponential_ceiling(attempt: int, ceiling: float) -> None:
    rng = random.Random(attempt)
    delays = [backoff_seconds(attempt, base=0.5, cap=30.0, rng=rng) for _ in range(200)]
    assert all(0.0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.8  # spread over the whole range, not clustered
    assert min(delays) < ceiling * 0.2


def test_retry_while_attempts_and_time_are_left() -> None:
    decision = decide(
        kind="atlas.bundle",
        charged_attempts=1,
        max_attempts=5,
        elapsed_seconds=1.0,
        max_elapsed_seconds=3600,
    )
    assert isinstance(decision, RetryLater)
    assert 0.0 <= decision.delay_seconds <= 0.5


def test_give_up_when_attempts_are_exhausted() -> None:
    decision = decide(
        kind="atlas.bundle",
        charged_attempts=5,
        max_attempts=5,
        elapsed_seconds=1.0,
        max_elapsed_seconds=3600,
    )
    assert decision == GiveUp(Reason.RETRIES_EXHAUSTED)


def test_give_up_when_the_next_attempt_would_start_past_the_elapsed_budget() -> None:
    decision = decide(
        kind="atlas.bundle",
        charged_attempts=1,
        max_attempts=5,
        elapsed_seconds=3600,
        max_elapsed_seconds=3600,
    )
    assert decision == GiveUp(Reason.TIME_EXHAUSTED)


def test_error_documents_say_whether_retrying_helps() -> None:
    assert RecoverableError("flaky", "try later").as_doc() == {
        "code": "flaky",
        "message": "try later",
        "retryable": True,
    }
    assert PermanentError("bad", "never").as_doc()["retryable"] is False
