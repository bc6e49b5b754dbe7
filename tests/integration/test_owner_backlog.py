"""``owner_backlog`` (migrations c4d5e6f7a8b9, f2a3b4c5d6e7): the per-owner count of
unfinished jobs that admission reads, kept by triggers on ``jobs``. Driven through the real
transitions for two owners, the sum of an owner's rows equals the count of its unfinished
jobs after every step; a statement that finishes nothing (claim, heartbeat) does not write
it; a statement writes only its connection's row of each owner, so two connections
finishing jobs of one owner at the same time do not wait for each other there."""

from __future__ import annotations

import importlib.util
from contextlib import AsyncExitStack
from types import ModuleType

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import TERMINAL_SQL
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.lifecycle import TERMINAL_STATES, JobState, Reason
from atlas_jobs._app.transitions import Actor, NewJob, Transitions, error_doc
from tests.factory import CLIENT, WORKER, JobFactory, MadeJob
from tests.support import REPO
from atlas_jobs._workers.pruner import Pruner

OPERATOR = Actor("operator", "op-1")
BOTH = ("alice", "bob")

COUNTERS = "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
COUNTED = f"SELECT owner, count(*) FROM jobs WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY owner"
COUNTER_WRITES = """
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)
  FROM pg_stat_xact_user_tables WHERE relname = 'owner_backlog'
"""


def migration(revision: str) -> ModuleType:
    [path] = (REPO / "alembic" / "versions").glob(f"*{revision}_*.py")
    spec = importlib.util.spec_from_file_location(f"revision_{revision}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("revision", ["c4d5e6f7a8b9", "f2a3b4c5d6e7"])
def test_the_migration_counts_the_lifecycle_terminal_states_as_finished(revision: str) -> None:
    written = {state.strip().strip("'") for state in migration(revision).FINISHED.split(",")}
    assert written == {str(state) for state in TERMINAL_STATES}


async def assert_counters_exact(engine: AsyncEngine, step: str) -> dict[str, int]:
    async with engine.connect() as conn:
        kept = {row[0]: int(row[1]) for row in await conn.execute(text(COUNTERS))}
        counted = {row[0]: int(row[1]) for row in await conn.execute(text(COUNTED))}
    nonzero = {owner: n for owner, n in kept.items() if n}
    assert nonzero == counted, f"after {step}: kept {kept}, counted {counted}"
    return counted


def new_job(owner: str, kind: str = "test.backlog") -> NewJob:
    return NewJob(
        owner=owner,
        kind=kind,
        kind_version=1,
        input={},
        max_attempts=3,
        max_elapsed_seconds=3600,
    )


async def test_the_counter_follows_every_kind_of_transition(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory
) -> None:
    t = transitions
    step = assert_counters_exact
    await step(engine, "nothing")

    made = {}
    for owner in BOTH:  # create, claim, publish, fail, cancel, give up, wait
        for state in JobState:
            made[owner, state] = await jobs.make(state, owner=owner)
            await step(engine, f"{owner} {state}")
    assert await step(engine, "the factory") == {"alice": 5, "bob": 5}

    async with engine.begin() as conn:  # create_many: two owners in one statement
        await t.create_many(conn, [new_job("bob"), new_job("alice"), new_job("bob")], actor=CLIENT)
    assert await step(engine, "create_many") == {"alice": 6, "bob": 7}
    async with engine.begin() as conn:  # under the admission cap
        await t.create_many(conn, [new_job("alice")] * 3, actor=CLIENT, admission_cap=100)
    assert await step(engine, "create_many admitted") == {"alice": 9, "bob": 7}

    alice_running = made["alice", JobState.RUNNING]
    assert alice_running.attempt_id is not None
    async with engine.begin() as conn:  # running -> queued
        moved = await t.retry_later(
            conn,
            alice_running.id,
            alice_running.attempt_id,
            error=error_doc("flaky", "again", retryable=True),
            delay_seconds=0,
            actor=WORKER,
        )
        assert moved.ok
    await step(engine, "retry_later")

    for owner in BOTH:  # unresolved -> queued, then queued -> canceled
        unresolved = made[owner, JobState.UNRESOLVED].id
        async with engine.begin() as conn:
            assert (await t.resume(conn, unresolved, actor=OPERATOR)).ok
        await step(engine, f"{owner} resume")
        async with engine.begin() as conn:
            assert (await t.request_cancel(conn, unresolved, actor=CLIENT)).ok
        await step(engine, f"{owner} request_cancel of a queued job")

    cancel_requested = made["bob", JobState.CANCEL_REQUESTED]
    assert cancel_requested.attempt_id is not None
    async with engine.begin() as conn:  # cancel_requested -> canceled
        moved = await t.stop_canceled(
            conn, cancel_requested.id, cancel_requested.attempt_id, actor=WORKER
        )
        assert moved.ok
    await step(engine, "stop_canceled")

    async with engine.begin() as conn:  # waiting -> canceled
        moved = await t.request_cancel(conn, made["alice", JobState.WAITING].id, actor=CLIENT)
        assert moved.ok
    await step(engine, "request_cancel of a waiting job")

    for owner in BOTH:  # a finished job runs again as a new job
        async with engine.begin() as conn:
            assert (await t.replay(conn, made[owner, JobState.FAILED].id, actor=OPERATOR)).ok
        await step(engine, f"{owner} replay")

    bob_queued = made["bob", JobState.QUEUED]  # claim and give up, then the operator
    async with engine.begin() as conn:
        [claimed] = await t.claim(
            conn, worker_id="w-test", handlers=[handler_key(bob_queued.kind, 1)], limit=1
        )
        assert claimed.id == bob_queued.id
        moved = await t.give_up(
            conn,
            claimed.id,
            claimed.current_attempt_id,
            error=error_doc("flaky", "gave up", retryable=True),
            reason=Reason.RETRIES_EXHAUSTED,
            actor=WORKER,
        )
        assert moved.ok
    await step(engine, "claim + give_up")
    async with engine.begin() as conn:
        moved = await t.operator_decide(conn, bob_queued.id, decision="fail", actor=OPERATOR)
        assert moved.ok
    before_prune = await step(engine, "operator_decide")

    clock.advance(3600)  # past every retention: the pruner deletes finished jobs only
    report = await Pruner(engine, clock, keep_seconds=0).run_once()
    assert report.pruned > 0
    assert await step(engine, "prune") == before_prune

    async with engine.begin() as conn:  # any delete, unfinished rows included
        await conn.execute(
            text(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE owner = 'alice'"
                f" AND state NOT IN ({TERMINAL_SQL}) ORDER BY id LIMIT 2)"
            )
        )
    after_delete = await step(engine, "a raw delete")
    assert after_delete["alice"] == before_prune["alice"] - 2

    async with engine.begin() as conn:  # any update, even an owner change
        await conn.execute(
            text(
                "UPDATE jobs SET owner = 'carol' WHERE id IN (SELECT id FROM jobs"
                " WHERE owner = 'bob' ORDER BY id LIMIT 3)"
            )
        )
    await step(engine, "an owner change")


async def test_claims_and_heartbeats_do_not_write_the_counter(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    made = await jobs.make(JobState.QUEUED)
    async with engine.begin() as conn:
        # This backend's pending (not yet flushed) statistics: compare, do not expect 0.
        writes = (await conn.execute(text(COUNTER_WRITES))).scalar_one()
        [claimed] = await transitions.claim(
            conn, worker_id="w-test", handlers=[made.handler], limit=1
        )
        await transitions.heartbeat(conn, claimed.id, claimed.current_attempt_id)
        assert (await conn.execute(text(COUNTER_WRITES))).scalar_one() == writes
        await transitions.fail(
            conn,
            claimed.id,
            claimed.current_attempt_id,
            error=error_doc("boom", "permanent", retryable=False),
            actor=WORKER,
        )
        assert (await conn.execute(text(COUNTER_WRITES))).scalar_one() == writes + 1
    await assert_counters_exact(engine, "fail")


async def test_admission_reads_the_counter_and_truncate_empties_it(
    engine: AsyncEngine, jobs: JobFactory
) -> None:
    for _ in range(3):
        await jobs.make(JobState.QUEUED, owner="dave")
    await jobs.make(JobState.SUCCEEDED, owner="dave")
    admission = text("SELECT atlas_admission_count(:owner, :up_to)")
    async with engine.connect() as conn:
        assert (await conn.execute(admission, {"owner": "dave", "up_to": 10})).scalar_one() == 3
        assert (await conn.execute(admission, {"owner": "dave", "up_to": 2})).scalar_one() == 2
        assert (await conn.execute(admission, {"owner": "erin", "up_to": 10})).scalar_one() == 0
        await conn.rollback()
    async with engine.begin() as conn:
        await conn.execute(text("TRUNCATE jobs CASCADE"))
    assert await assert_counters_exact(engine, "truncate") == {}
    async with engine.connect() as conn:
        assert (await conn.execute(text(COUNTERS))).all() == []


ID_SLOT = "get_byte(uuid_send(CAST(:id AS uuid)), 15) & 15"
CONNECTION_SLOT = "SELECT pg_backend_pid() & 15"
OWNER_ROWS = "SELECT slot, unfinished FROM owner_backlog WHERE owner = :owner"


async def owner_rows(conn: AsyncConnection, owner: str) -> dict[int, int]:
    return {row[0]: row[1] for row in await conn.execute(text(OWNER_ROWS), {"owner": owner})}


async def test_a_statement_writes_only_its_connections_row(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """Jobs of all id slots, created in one statement, counted on one row: the slot of the
    creating connection."""
    async with engine.begin() as conn:
        slot = (await conn.execute(text(CONNECTION_SLOT))).scalar_one()
        created = await transitions.create_many(conn, [new_job("gina")] * 40, actor=CLIENT)
        id_slots = {
            (await conn.execute(text(f"SELECT {ID_SLOT}"), {"id": one.job.id})).scalar_one()
            for one in created
        }
        rows = (await conn.execute(text(OWNER_ROWS), {"owner": "gina"})).all()
    assert len(id_slots) > 1  # the ids alone would have spread them
    assert [tuple(row) for row in rows] == [(slot, 40)]
    await assert_counters_exact(engine, "create_many")


async def test_two_connections_finishing_jobs_of_one_owner_do_not_wait_for_each_other(
    engine: AsyncEngine, transitions: Transitions, jobs: JobFactory
) -> None:
    """Two running jobs of one owner whose ids share their last nibble (before revision
    f2a3b4c5d6e7, both counted on one row) finish at the same time in two open
    transactions on two connections with different slots: the second commits while the
    first still holds its writes (with a lock timeout, it would fail if it had to wait)."""
    by_id_slot: dict[int, MadeJob] = {}
    async with engine.connect() as conn:
        while True:  # at most 17 jobs: two of them share a slot
            made = await jobs.make(JobState.RUNNING, owner="hank")
            slot = (await conn.execute(text(f"SELECT {ID_SLOT}"), {"id": made.id})).scalar_one()
            if slot in by_id_slot:
                pair = (by_id_slot[slot], made)
                break
            by_id_slot[slot] = made
        before = await owner_rows(conn, "hank")
    async with AsyncExitStack() as stack:
        slots: dict[int, AsyncConnection] = {}
        while len(slots) < 2:  # two pooled connections whose slots differ
            conn = await stack.enter_async_context(engine.connect())
            slots.setdefault((await conn.execute(text(CONNECTION_SLOT))).scalar_one(), conn)
        first, second = slots.values()
        error = error_doc("boom", "permanent", retryable=False)
        for conn, one in zip((first, second), pair, strict=True):
            await conn.execute(text("SET LOCAL lock_timeout = '5s'"))
            assert one.attempt_id is not None
            moved = await transitions.fail(conn, one.id, one.attempt_id, error=error, actor=WORKER)
            assert moved.ok
        await second.commit()  # the first is still open
        await first.commit()
    await assert_counters_exact(engine, "two concurrent finishes")
    async with engine.connect() as conn:
        after = await owner_rows(conn, "hank")
    # each finish took 1 from its own connection's row, and nothing else changed
    changed = {slot: after[slot] - before.get(slot, 0) for slot in after}
    assert {slot: n for slot, n in changed.items() if n} == dict.fromkeys(slots, -1)
