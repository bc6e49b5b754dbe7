"""The Python vocabularies equal the values the migrated database allows.

The database is asked, not our source: the function the CHECK constraint of ``jobs``
calls (atlas_jobs._app.db.row_rules) is called by PostgreSQL with every Python value plus values
that must be refused (a bogus word, and words from the other vocabularies, which must
never mix), and the rule a refusal names is read back; the other CHECKs' definitions
are read back with ``pg_get_constraintdef`` and evaluated on the same words. A state
added in ``atlas_jobs._app.lifecycle`` without a migration, or a migration that drifts from it,
fails here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.lifecycle import STATE_REASONS, AttemptOutcome, DeliveryState, JobState, Reason

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


async def check_expression(conn: AsyncConnection, table: str, name: str) -> str:
    definition = (
        await conn.execute(
            text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conrelid = CAST(:table AS regclass) AND conname = :name AND contype = 'c'"
            ),
            {"table": table, "name": name},
        )
    ).scalar_one()
    assert definition.startswith("CHECK ")
    return str(definition).removeprefix("CHECK ")


async def allowed_values(engine: AsyncEngine, table: str, name: str, column: str) -> set[str]:
    """The candidate words for which the database's CHECK expression holds."""
    async with engine.connect() as conn:
        expression = await check_expression(conn, table, name)
        rows = await conn.execute(
            text(
                f"SELECT {column} FROM unnest(CAST(:words AS text[])) AS t({column}) "
                f"WHERE {expression}"
            ),
            {"words": [str(w) for w in EVERY_WORD]},
        )
        return {row[0] for row in rows}


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
    ],
)
async def test_job_vocabulary_equals_the_database(
    engine: AsyncEngine,
    call: str,
    column: str,
    fixed: Mapping[str, str | None],
    rule: str,
    vocabulary: type[StrEnum],
) -> None:
    assert await words_allowed(engine, call, column, fixed, rule) == values(vocabulary)


@pytest.mark.parametrize(
    ("table", "constraint", "column", "vocabulary"),
    [
        ("attempts", "ck_attempts_outcome_known", "outcome", AttemptOutcome),
        ("job_history", "ck_job_history_to_known", "to_state", JobState),
        ("job_history", "ck_job_history_from_known", "from_state", JobState),
    ],
)
async def test_vocabulary_equals_the_database(
    engine: AsyncEngine, table: str, constraint: str, column: str, vocabulary: type[StrEnum]
) -> None:
    allowed = await allowed_values(engine, table, constraint, column)
    assert allowed == values(vocabulary)


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
