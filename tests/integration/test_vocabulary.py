"""The Python vocabularies equal the values the migrated database allows.

The database is asked, not our source: each CHECK constraint's definition is read back
with ``pg_get_constraintdef`` and evaluated by PostgreSQL against every Python value
plus values that must be refused (a bogus word, and words from the other
vocabularies, which must never mix). A state added in ``app.lifecycle`` without a
migration, or a migration that drifts from it, fails here.
"""

from __future__ import annotations

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


@pytest.mark.parametrize(
    ("table", "constraint", "column", "vocabulary"),
    [
        ("jobs", "ck_jobs_state_known", "state", JobState),
        ("jobs", "ck_jobs_delivery_state_known", "delivery_state", DeliveryState),
        ("attempts", "ck_attempts_outcome_known", "outcome", AttemptOutcome),
        ("job_history", "ck_job_history_to_known", "to_state", JobState),
        ("job_history", "ck_job_history_from_known", "from_state", JobState),
    ],
)
async def test_vocabulary_equals_the_database(
    engine: AsyncEngine, table: str, constraint: str, column: str, vocabulary: type[StrEnum]
) -> None:
    allowed = await allowed_values(engine, table, constraint, column)
    assert allowed == {member.value for member in vocabulary}


async def test_state_reasons_equal_the_database(engine: AsyncEngine) -> None:
    """Every (state, reason) pair the database accepts is one ``STATE_REASONS`` allows."""
    async with engine.connect() as conn:
        expression = await check_expression(conn, "jobs", "ck_jobs_reason_matches_state")
        states = [*JobState, "bogus"]
        reasons = [*Reason, "bogus", "cancel_too_late"]
        rows = await conn.execute(
            text(
                "SELECT state, reason FROM unnest(CAST(:states AS text[])) AS s(state) "
                f"CROSS JOIN unnest(CAST(:reasons AS text[])) AS r(reason) WHERE {expression}"
            ),
            {"states": [str(s) for s in states], "reasons": [str(r) for r in reasons]},
        )
        allowed = {(row.state, row.reason) for row in rows}
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
