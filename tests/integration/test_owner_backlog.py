"""``owner_backlog`` (migration c4d5e6f7a8b9): the per-owner count of unfinished jobs that
admission reads, kept by triggers on ``jobs``. Driven through the real transitions for
two owners, it equals the count of the owners' unfinished jobs after every step (and
each of an owner's 16 rows the count of its jobs whose id picks it); a
statement that finishes nothing (claim, heartbeat) does not write it."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.clock import Clock
from app.db.schema import TERMINAL_SQL
from app.kinds import handler_key
from app.lifecycle import TERMINAL_STATES, JobState, Reason
from app.transitions import Actor, NewJob, Transitions, error_doc
from tests.factory import CLIENT, WORKER, JobFactory
from tests.support import REPO
from workers.pruner import Pruner

OPERATOR = Actor("operator", "op-1")
BOTH = ("alice", "bob")

COUNTERS = "SELECT owner, sum(unfinished) FROM owner_backlog GROUP BY owner"
COUNTED = f"SELECT owner, count(*) FROM jobs WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY owner"
SLOTS_KEPT = "SELECT owner, slot, unfinished FROM owner_backlog WHERE unfinished <> 0"
SLOTS_COUNTED = (
    "SELECT owner, get_byte(uuid_send(id), 15) & 15, count(*) FROM jobs"
    f" WHERE state NOT IN ({TERMINAL_SQL}) GROUP BY 1, 2"
)
COUNTER_WRITES = """
SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)
  FROM pg_stat_xact_user_tables WHERE relname = 'owner_backlog'
"""


def migration() -> ModuleType:
    [path] = (REPO / "alembic" / "versions").glob("*c4d5e6f7a8b9_owner_backlog.py")
    spec = importlib.util.spec_from_file_location("owner_backlog_revision", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_counts_the_lifecycle_terminal_states_as_finished() -> None:
    written = {state.strip().strip("'") for state in migration().FINISHED.split(",")}
    assert written == {str(state) for state in TERMINAL_STATES}


async def assert_counters_exact(engine: AsyncEngine, step: str) -> dict[str, int]:
    async with engine.connect() as conn:
        kept = {row[0]: int(row[1]) for row in await conn.execute(text(COUNTERS))}
        counted = {row[0]: int(row[1]) for row in await conn.execute(text(COUNTED))}
        slots_kept = {(r[0], r[1]): r[2] for r in await conn.execute(text(SLOTS_KEPT))}
        slots_counted = {(r[0], r[1]): r[2] for r in await conn.execute(text(SLOTS_COUNTED))}
    nonzero = {owner: n for owner, n in kept.items() if n}
    assert nonzero == counted, f"after {step}: kept {kept}, counted {counted}"
    assert slots_kept == slots_counted, f"after {step}: each job counts in its id's slot"
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
