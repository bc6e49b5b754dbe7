"""``jobs_updated`` joins its transition tables without a nested loop whatever the
session's first UPDATE was (revision b4c5d6e7f8a9). PL/pgSQL plans a trigger's query once
per session, with the row counts of its first call: after a one-row update (an idle
worker's first claim), a plain join of ``new_rows`` with ``old_rows`` stays a nested loop,
and every later batch on that connection compares each new row with each old one. The
plans are read with ``auto_explain`` (nested statements, sent to this client)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import libpq_url
from atlas_jobs._app.transitions import Actor, Transitions
from tests.support import alembic
from tests.workers.dbwait import new_job

UPDATE = "UPDATE jobs SET version = version + 1 WHERE id = ANY($1::uuid[])"


async def queued(engine: AsyncEngine, transitions: Transitions, n: int) -> list[uuid.UUID]:
    async with engine.begin() as conn:
        made = await transitions.create_many(
            conn, [new_job("atlas.noop", {}) for _ in range(n)], actor=Actor("client", "alice")
        )
    return [applied.job.id for applied in made]


async def trigger_plans_of_a_batch_after_one_row(
    database_url: str, ids: list[uuid.UUID]
) -> list[str]:
    """The plans of jobs_updated's queries for an UPDATE of ``ids[1:]``, on a connection
    whose first UPDATE of jobs touched one row (``ids[0]``)."""
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        heard: list[str] = []
        conn.add_log_listener(lambda _conn, message: heard.append(message.message))
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute(
            "SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
            " SET client_min_messages = log"
        )
        await conn.execute(UPDATE, ids[:1])  # the session's first: its plans are made here
        await asyncio.sleep(0)
        heard.clear()
        await conn.execute(UPDATE, ids[1:])
        await asyncio.sleep(0)  # asyncpg calls log listeners with call_soon
        return [message for message in heard if "new_rows" in message]
    finally:
        await conn.close()


async def test_a_batch_after_a_one_row_update_is_joined_without_a_nested_loop(
    database_url: str, engine: AsyncEngine, transitions: Transitions
) -> None:
    ids = await queued(engine, transitions, 101)
    plans = await trigger_plans_of_a_batch_after_one_row(database_url, ids)
    assert plans, "auto_explain reported no plan of the trigger's queries"
    assert all("Full Join" in plan for plan in plans), plans
    assert not any("Nested Loop" in plan for plan in plans), plans


async def test_the_previous_revision_kept_the_one_row_nested_loop(
    database_url: str, engine: AsyncEngine, transitions: Transitions
) -> None:
    """The control: at revision f2a3b4c5d6e7 the same statements plan a nested loop, so
    the test above can see one."""
    ids = await queued(engine, transitions, 101)
    await alembic(database_url, "downgrade", "f2a3b4c5d6e7")
    plans = await trigger_plans_of_a_batch_after_one_row(database_url, ids)
    assert plans, "auto_explain reported no plan of the trigger's queries"
    assert any("Nested Loop" in plan for plan in plans), plans
