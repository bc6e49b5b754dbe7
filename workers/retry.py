"""Retry backoff: exponential with full jitter.

Full jitter (``uniform(0, min(cap, base * 2 ** (n - 1)))``) spreads retries of jobs that
failed together, so a dependency that recovers is not hit by a synchronized wave.
Base and cap come from the job's kind in :data:`atlas_jobs._app.kinds.KINDS`. Whether another
attempt may run at all is not decided here: the budget (``max_attempts``,
``max_elapsed_seconds``, recorded on each job when it is accepted) has one rule,
:func:`atlas_jobs._app.lifecycle.budget_verdict`, applied on database time by the transition
service for a worker's retry and for the reaper's rescue alike.
"""

from __future__ import annotations

import random

from atlas_jobs._app.kinds import KINDS

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
