"""The Python vocabularies equal the values the migrated database allows.

The database is asked, not our source: the functions that the CHECK constraints of
``jobs``, ``job_history`` and ``attempts`` call (app.db.row_rules) are called by
PostgreSQL with every Python value plus values that must be refused (a bogus word, and
words from the other vocabularies, which must never mix), and the rule a refusal names
is read back. A state added in ``app.lifecycle`` without a
migration, or a migration that drifts from it, fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.lifecycle import STATE_REASONS, AttemptOutcome, DeliveryState, JobState, Reason

BOGUS = ("bogus", "", "QUEUED", "done", "pending", "completed")
EVERY_WORD = sorted(
    {*JobState, *DeliveryState, *AttemptOutcome, *Reason, *BOGUS}, key=lambda v: str(v)
)
REFUSED = re.compile(r'violates check constraint "(\w+)"')

# A job's row as its rules function takes it, every other column left so that only the
# vocabulary rules -- checked first, state, then delivery state, then reason -- decide.
JOB_CALL = (
    "atlas_jobs_fits(:state, :reason, :delivery, false, false, false, false, false, NULL,"
    " false, 0, 0, 1, 0)"
)
HISTORY_CALL = "atlas_job_history_fits(:from_state, :to_state)"
ATTEMPT_CALL = "atlas_attempts_fits(:outcome, true)"


async def refusal(conn: AsyncConnection, call: str, values: Mapping[str, str | None]) -> str:
    """The constraint a refused row names, or "" when the row fits."""
    try:
        async with conn.begin_nested():
            await conn.execute(text(f"SELECT {call}"), dict(values))
    except IntegrityError as exc:
        found = REFUSED.search(str(exc))
        return found.group(1) if found else str(exc)  # never a rule's name
    return ""


async def words_allowed(
    engine: AsyncEngine, call: str, column: str, fixed: Mapping[str, str | None], rule: str
) -> set[str]:
    """The candidate words the database does not refuse under ``rule``."""
    allowed = set()
    async with engine.connect() as conn, conn.begin():
        for word in EVERY_WORD:
            if await refusal(conn, call, {**fixed, column: str(word)}) != rule:
                allowed.add(str(word))
    return allowed


def values(vocabulary: Iterable[StrEnum]) -> set[str]:
    return {member.value for member in vocabulary}


@pytest.mark.parametrize(
    ("call", "column", "fixed", "rule", "vocabulary"),
    [
        (JOB_CALL, "state", {"reason": "new", "delivery": "none"}, "ck_jobs_state_known", JobState),
        (
            JOB_CALL,
            "delivery",
            {"state": "queued", "reason": "new"},
            "ck_jobs_delivery_state_known",
            DeliveryState,
        ),
        (HISTORY_CALL, "to_state", {"from_state": None}, "ck_job_history_to_known", JobState),
        (
            HISTORY_CALL,
            "from_state",
            {"to_state": "queued"},
            "ck_job_history_from_known",
            JobState,
        ),
        (ATTEMPT_CALL, "outcome", {}, "ck_attempts_outcome_known", AttemptOutcome),
    ],
)
async def test_vocabulary_equals_the_database(
    engine: AsyncEngine,
    call: str,
    column: str,
    fixed: Mapping[str, str | None],
    rule: str,
    vocabulary: type[StrEnum],
) -> None:
    assert await words_allowed(engine, call, column, fixed, rule) == values(vocabulary)


async def test_a_job_history_row_may_have_no_from_state(engine: AsyncEngine) -> None:
    """A creation's history row has none (the rule's ``IS NULL`` arm)."""
    async with engine.connect() as conn, conn.begin():
        assert await refusal(conn, HISTORY_CALL, {"from_state": None, "to_state": "new"}) == (
            "ck_job_history_to_known"
        )
        assert await refusal(conn, HISTORY_CALL, {"from_state": None, "to_state": "queued"}) == ""


async def test_state_reasons_equal_the_database(engine: AsyncEngine) -> None:
    """Every (state, reason) pair the database accepts is one ``STATE_REASONS`` allows."""
    allowed = set()
    async with engine.connect() as conn, conn.begin():
        for state in [*JobState, "bogus"]:
            for reason in [*Reason, "bogus", "cancel_too_late"]:
                pair = {"state": str(state), "reason": str(reason), "delivery": "none"}
                refused = await refusal(conn, JOB_CALL, pair)
                if refused not in ("ck_jobs_state_known", "ck_jobs_reason_matches_state"):
                    allowed.add((str(state), str(reason)))
    expected = {(s.value, r.value) for s, rs in STATE_REASONS.items() for r in rs}
    assert allowed == expected


INSERT_JOB = text(
    "INSERT INTO jobs (owner, kind, kind_version, input, state, reason, "
    "max_attempts, max_elapsed_seconds) VALUES ('o', 'k', 1, '{}', :state, :reason, 1, 60)"
)


@pytest.mark.parametrize(
    ("state", "reason", "constraint"),
    [
        ("bogus", "new", "ck_jobs_(state_known|reason_matches_state)"),
        ("queued", "claimed", "ck_jobs_reason_matches_state"),
        ("queued", "cancel_too_late", "ck_jobs_reason_matches_state"),
    ],
)
async def test_unknown_words_are_refused_on_write(
    engine: AsyncEngine, state: str, reason: str, constraint: str
) -> None:
    """The constraints are enforced, not only declared."""
    async with engine.connect() as conn:
        await conn.execute(INSERT_JOB, {"state": "queued", "reason": "new"})  # the control
        await conn.rollback()
        with pytest.raises(IntegrityError, match=constraint):
            await conn.execute(INSERT_JOB, {"state": state, "reason": reason})
        await conn.rollback()
