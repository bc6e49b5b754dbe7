"""Retry policy: exponential backoff with full jitter, bounded by attempts and elapsed time.

Full jitter (``uniform(0, min(cap, base * 2 ** (n - 1)))``) spreads retries of jobs that
failed together, so a dependency that recovers is not hit by a synchronized wave.
The budget (``max_attempts``, ``max_elapsed_seconds``) is recorded on each job when it is
accepted, from its kind in :data:`app.kinds.KINDS`; base and cap come from the kind.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from app.kinds import KINDS
from app.lifecycle import Reason

DEFAULT_BASE_SECONDS = 1.0
DEFAULT_CAP_SECONDS = 60.0


def backoff_seconds(
    attempt: int,
    *,
    base: float,
    cap: float,
    rng: random.Random | None = None,
) -> float:
    """Delay before attempt ``attempt + 1`` after attempt ``attempt`` (1-based) failed."""
    ceiling = min(cap, base * (2 ** max(attempt - 1, 0)))
    return (rng or random).uniform(0.0, ceiling)  # jitter, not crypto


def kind_backoff(kind: str, attempt: int, rng: random.Random | None = None) -> float:
    """:func:`backoff_seconds` with the kind's base and cap (defaults for unknown kinds)."""
    spec = KINDS.get(kind)
    base = spec.retry_base_seconds if spec else DEFAULT_BASE_SECONDS
    cap = spec.retry_max_seconds if spec else DEFAULT_CAP_SECONDS
    return backoff_seconds(attempt, base=base, cap=cap, rng=rng)


@dataclass(frozen=True, slots=True)
class RetryLater:
    delay_seconds: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: Reason


RetryDecision = RetryLater | GiveUp


def decide(
    *,
    kind: str,
    charged_attempts: int,
    max_attempts: int,
    elapsed_seconds: float,
    max_elapsed_seconds: float,
    rng: random.Random | None = None,
) -> RetryDecision:
    """What to do after a recoverable error.

    ``charged_attempts`` counts the attempt that just failed. Give up when no attempt
    is left, or when the next attempt could not even start before the elapsed budget
    runs out -- never loop forever, never drop silently.
    """
    if charged_attempts >= max_attempts:
        return GiveUp(Reason.RETRIES_EXHAUSTED)
    delay = kind_backoff(kind, charged_attempts, rng)
    if elapsed_seconds + delay >= max_elapsed_seconds:
        return GiveUp(Reason.TIME_EXHAUSTED)
    return RetryLater(delay)
