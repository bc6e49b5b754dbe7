"""What one creation costs the database, pinned by shape (revision d0e1f2a3b4c5).

* One job is created by the statement's ``one`` shape: its fields bound as scalars -- no
  array for the client to encode element by element, none for the server to unnest and
  sort; a batch binds one array per field. Both leave the same row and history.
* An insert into ``jobs`` runs ONE trigger function (the workers' wake-up and the owner's
  backlog counter), counted by PostgreSQL's function statistics.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.row_rules import JOB_RULES
from atlas_jobs._app.db.schema import job_history, jobs
from atlas_jobs._app.transitions import Applied, NewJob, Transitions
from tests.factory import CLIENT
from tests.integration.test_batch_equivalence import _shape
from tests.sent_statements import sent

NEW = NewJob(
    owner="alice",
    kind="test.shape",
    kind_version=1,
    input={"n": 1},
    max_attempts=3,
    max_elapsed_seconds=60,
    request_id="req-1",
)


def arrays(params: dict[str, Any]) -> set[str]:
    return {name for name, value in params.items() if isinstance(value, list | tuple)}


async def test_one_job_binds_scalars_and_a_batch_binds_arrays_with_the_same_outcome(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    with sent(engine) as one:
        async with engine.begin() as conn:
            [single] = await transitions.create_many(conn, [NEW], actor=CLIENT)
    [(statement, params)] = one
    assert "unnest" not in statement
    assert arrays(params) == set()
    assert params["p_id"] == single.job.id

    with sent(engine) as many:
        async with engine.begin() as conn:
            batch = await transitions.create_many(conn, [NEW, NEW], actor=CLIENT)
    [(statement, params)] = many
    assert "unnest" in statement
    assert {"p_id", "p_owner", "p_request_id"} <= arrays(params)
    # The inputs: ONE JSON array of the batch's documents, in batch order.
    assert json.loads(params["p_input"]) == [dict(NEW.input), dict(NEW.input)]
    assert params["p_data"] is None  # no job of the batch carries it: one NULL
    assert [created.job.id for created in batch] == params["p_id"]  # in batch order

    async with engine.connect() as conn:
        history = {
            row.job_id: row
            for row in await conn.execute(
                select(job_history).where(
                    job_history.c.job_id.in_([single.job.id, batch[0].job.id])
                )
            )
        }
    assert _shape(single.job) == _shape(batch[0].job)
    assert _shape(history[single.job.id]) == _shape(history[batch[0].job.id])
    assert history[single.job.id].event_id == "req-1"


async def test_the_keyed_creation_binds_scalars(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    keyed = NEW._replace(idempotency_key="k-1")
    with sent(engine) as seen:
        async with engine.begin() as conn:
            created = await transitions.create_keyed(
                conn, keyed, fingerprint="f", actor=CLIENT, admission_cap=10
            )
    [(statement, params)] = seen
    assert "unnest" not in statement
    assert arrays(params) == set()
    assert isinstance(created, Applied)
    async with engine.connect() as conn:
        stored = await conn.scalar(
            select(jobs.c.idempotency_key).where(jobs.c.id == created.job.id)
        )
    assert stored == "k-1"


async def test_an_insert_runs_one_trigger_function_once(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SET LOCAL track_functions = 'pl'"))
        await transitions.create_many(conn, [NEW, NEW], actor=CLIENT)
        called = {
            row.funcname: row.calls
            for row in await conn.execute(
                text(
                    "SELECT s.funcname, s.calls FROM pg_stat_xact_user_functions AS s"
                    " JOIN pg_proc AS p ON p.oid = s.funcid"
                    " WHERE p.prorettype = CAST('trigger' AS regtype)"
                )
            )
        }
    assert called == {"atlas_jobs_inserted": 1}


async def test_the_jobs_rules_are_one_call_of_a_plpgsql_function(engine: AsyncEngine) -> None:
    """PostgreSQL re-reads and re-plans every CHECK of ``jobs`` on each statement that
    writes it; the eleven rules are one call of an IMMUTABLE PL/pgSQL function, planned
    once per session (revision a3b4c5d6e7f8; their meaning: test_vocabulary.py,
    test_row_rules.py and ``RAW_VIOLATIONS`` in test_transitions.py)."""
    async with engine.connect() as conn:
        definitions = (
            (
                await conn.execute(
                    text(
                        "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                        " WHERE contype = 'c' AND conrelid = CAST('jobs' AS regclass)"
                    )
                )
            )
            .scalars()
            .all()
        )
        language, volatility = (
            await conn.execute(
                text(
                    "SELECT l.lanname, CAST(p.provolatile AS text) FROM pg_proc AS p"
                    " JOIN pg_language AS l ON l.oid = p.prolang"
                    " WHERE p.proname = 'atlas_jobs_fits'"
                )
            )
        ).one()
    [definition] = definitions
    assert definition.startswith(f"CHECK ({JOB_RULES.function}(state, reason, delivery_state, ")
    assert (language, volatility) == ("plpgsql", "i")
