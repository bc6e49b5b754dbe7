"""Retry backoff: exponential with full jitter.

Full jitter (``uniform(0, min(cap, base * 2 ** (n - 1)))``) spreads retries of jobs that
failed together, so a dependency that recovers is not hit by a synchronized wave.
Base, cap and jitter come from the job's kind (its declared retry policy). Whether another
attempt may run at all is not decided here: the budget (``max_attempts``,
``max_elapsed_seconds``, recorded on each job when it is accepted) has one rule,
:func:`atlas_jobs._app.lifecycle.budget_verdict`, applied on database time by the transition
service for a worker's retry and for the reaper's rescue alike.
"""

from __future__ import annotations

import random

from atlas_jobs._app.kinds import KINDS, declared_kind

DEFAULT_BASE_SECONDS = 1.0
DEFAULT_CAP_SECONDS = 60.0


def backoff_seconds(
    attempt: int,
    *,
    base: float,
    cap: float,
    rng: random.Random | None = None,
    jitter: bool = True,
) -> float:
    """Delay before attempt ``attempt + 1`` after attempt ``attempt`` (1-based) failed."""
    ceiling = min(cap, base * (2 ** max(attempt - 1, 0)))
    if not jitter:
        return float(ceiling)
    return (rng or random).uniform(0.0, ceiling)  # jitter, not crypto


def kind_backoff(
    kind: str, attempt: int, rng: random.Random | None = None, *, version: int | None = None
) -> float:
    """:func:`backoff_seconds` with the policy of the kind (at ``version`` when given:
    the declaration that runs it), defaults for unknown kinds."""
    spec = declared_kind(kind, version) if version is not None else KINDS.get(kind)
    if spec is None:
        return backoff_seconds(attempt, base=DEFAULT_BASE_SECONDS, cap=DEFAULT_CAP_SECONDS, rng=rng)
    return backoff_seconds(
        attempt,
        base=spec.retry_base_seconds,
        cap=spec.retry_max_seconds,
        rng=rng,
        jitter=spec.jitter,
    )
