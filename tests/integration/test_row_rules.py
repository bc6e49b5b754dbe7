"""The rules of ``jobs`` as one CHECK, a call of ``atlas_jobs_fits`` (atlas_jobs._app.db.row_rules,
revision a3b4c5d6e7f8): a refused row still says which rule it broke, the way PostgreSQL
says it of a CHECK -- as the inline CHECKs of ``job_history`` and ``attempts`` still do,
on every write tried here.

Every rule of ``jobs`` is tried on a raw UPDATE in
tests/integration/test_transitions.py (``RAW_VIOLATIONS``); the vocabularies in
tests/integration/test_vocabulary.py.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import JobState
from tests.factory import JobFactory

SECRET = "tiramisu-recipe"


async def refused(engine: AsyncEngine, sql: str, **params: object) -> asyncpg.PostgresError:
    """The server's error for ``sql``, which must be refused."""
    with pytest.raises(IntegrityError) as caught:
        async with engine.begin() as conn:
            await conn.execute(text(sql), params)
    error = caught.value.orig.__cause__ if caught.value.orig is not None else None
    assert isinstance(error, asyncpg.PostgresError)
    return error


async def test_a_refusal_names_the_rule_and_not_the_row(
    engine: AsyncEngine, jobs: JobFactory
) -> None:
    """SQLSTATE 23514, the former constraint's name in the message and in the CONSTRAINT
    field, the table in TABLE -- and no "Failing row contains" detail with the input."""
    made = await jobs.make(JobState.QUEUED, input={"secret": SECRET})
    error = await refused(
        engine, "UPDATE jobs SET lease_expires_at = now() WHERE id = :id", id=made.id
    )
    assert isinstance(error, asyncpg.CheckViolationError)
    assert error.sqlstate == "23514"
    assert str(error) == (
        'new row for relation "jobs" violates check constraint "ck_jobs_lease_iff_active"'
    )
    assert (error.constraint_name, error.table_name) == ("ck_jobs_lease_iff_active", "jobs")
    assert SECRET not in f"{error} {error.detail} {error.hint}"


async def test_the_first_broken_rule_is_named(engine: AsyncEngine, jobs: JobFactory) -> None:
    """A row breaking several rules names the first in atlas_jobs._app.db.row_rules' order: the
    vocabulary, then the former constraints' alphabetical order (the order PostgreSQL
    checks a table's CHECKs in)."""
    made = await jobs.make(JobState.QUEUED)
    error = await refused(
        engine,
        "UPDATE jobs SET state = 'failed', reason = 'new', lease_expires_at = now() WHERE id = :id",
        id=made.id,
    )
    assert error.constraint_name == "ck_jobs_reason_matches_state"
    error = await refused(
        engine,
        "UPDATE jobs SET state = 'failed', reason = 'error', lease_expires_at = now()"
        " WHERE id = :id",
        id=made.id,
    )
    assert error.constraint_name == "ck_jobs_failed_has_error"


async def test_a_rule_that_is_null_passes_as_a_check_did(
    engine: AsyncEngine, jobs: JobFactory
) -> None:
    """``state <> 'waiting' OR (wait_deadline_at IS NOT NULL AND wait_on_deadline IN
    (...))`` is NULL for a waiting job with a deadline and no ``wait_on_deadline``; a
    CHECK passes a NULL, and so does the rule's arm in the function."""
    made = await jobs.make(JobState.WAITING)
    async with engine.begin() as conn:
        changed = await conn.execute(
            text("UPDATE jobs SET wait_on_deadline = NULL WHERE id = :id"), {"id": made.id}
        )
    assert changed.rowcount == 1


HISTORY_ROW = (
    "INSERT INTO job_history (job_id, transition, from_state, to_state, actor)"
    " VALUES (:job_id, 'claim', :from_state, :to_state, 'test')"
)


@pytest.mark.parametrize(
    ("from_state", "to_state", "rule"),
    [
        ("queued", "bogus", "ck_job_history_to_known"),
        (None, "bogus", "ck_job_history_to_known"),
        ("bogus", "running", "ck_job_history_from_known"),
        ("bogus", "bogus", "ck_job_history_from_known"),
    ],
)
async def test_history_rules_hold_on_write(
    engine: AsyncEngine, from_state: str | None, to_state: str, rule: str
) -> None:
    job_id = uuid.uuid4()
    async with engine.begin() as conn:  # the control: known states
        await conn.execute(
            text(HISTORY_ROW), {"job_id": job_id, "from_state": None, "to_state": "queued"}
        )
    error = await refused(
        engine, HISTORY_ROW, job_id=job_id, from_state=from_state, to_state=to_state
    )
    assert (error.constraint_name, error.table_name) == (rule, "job_history")


@pytest.mark.parametrize(
    ("outcome", "ended_at", "rule"),
    [
        ("bogus", "now()", "ck_attempts_outcome_known"),
        ("running", "now()", "ck_attempts_ended_iff_not_running"),
        ("succeeded", "NULL", "ck_attempts_ended_iff_not_running"),
    ],
)
async def test_attempt_rules_hold_on_write(
    engine: AsyncEngine, jobs: JobFactory, outcome: str, ended_at: str, rule: str
) -> None:
    made = await jobs.make(JobState.RUNNING)
    update = f"UPDATE attempts SET outcome = :outcome, ended_at = {ended_at} WHERE id = :id"
    async with engine.begin() as conn:  # the control: a running attempt stays so
        await conn.execute(
            text("UPDATE attempts SET outcome = 'running', ended_at = NULL WHERE id = :id"),
            {"id": made.attempt_id},
        )
    error = await refused(engine, update, outcome=outcome, id=made.attempt_id)
    assert (error.constraint_name, error.table_name) == (rule, "attempts")
