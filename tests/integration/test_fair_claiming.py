"""Which queued job the claim takes: priority within a lane, fair share across owners,
concurrency keys -- through the real claim statement, on the real database."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db import scheduling_settings
from atlas_jobs._app.db.queries import KEY_RUNNING, PRUNE_LANES
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.transitions import Actor, NewJob, Transitions

CLIENT = Actor("client", "tests")
KIND = "test.fair"
HANDLERS = [handler_key(KIND, 1)]

# Many queued jobs of one owner, fast: straight into jobs (the insert trigger adds the lane).
BACKLOG = text(f"""
INSERT INTO jobs (owner, kind, kind_version, input, state, reason, max_attempts,
                  max_elapsed_seconds)
SELECT :owner, '{KIND}', 1, '{{}}'::jsonb, 'queued', 'new', 3, 600
  FROM generate_series(1, :n)
""")


def new(owner: str, *, priority: int | None = None, key: str | None = None) -> NewJob:
    return NewJob(
        owner=owner,
        kind=KIND,
        kind_version=1,
        input={},
        max_attempts=3,
        max_elapsed_seconds=600,
        priority=priority,
        concurrency_key=key,
        concurrency_limit=None if key is None else 2,
    )


async def create(
    engine: AsyncEngine, transitions: Transitions, jobs: Sequence[NewJob]
) -> list[Any]:
    async with engine.begin() as conn:
        created = await transitions.create_many(conn, jobs, actor=CLIENT)
    return [c.job.id for c in created]


async def claim(engine: AsyncEngine, transitions: Transitions, limit: int) -> list[Any]:
    async with engine.begin() as conn:
        return await transitions.claim(conn, worker_id="w-fair", handlers=HANDLERS, limit=limit)


async def test_a_higher_priority_starts_first_within_an_owners_kind_and_fifo_within_one(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    priorities = [4, 9, None, 0, 9, 4, 7]
    ids = await create(engine, transitions, [new("alice", priority=p) for p in priorities])
    order = [row.id for _ in ids for row in await claim(engine, transitions, 1)]
    expected = sorted(
        range(len(ids)), key=lambda i: (-(4 if priorities[i] is None else priorities[i]), i)
    )
    assert order == [ids[i] for i in expected]


async def test_one_owners_backlog_delays_another_owners_job_by_about_one_claim(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        await conn.execute(BACKLOG, {"owner": "big", "n": 20_000})
    await claim(engine, transitions, 10)  # the big owner's lane has been served
    [small] = await create(engine, transitions, [new("small")])
    first = await claim(engine, transitions, 10)
    assert small in [row.id for row in first]
    assert Counter(row.owner for row in first) == {"small": 1, "big": 9}


async def test_claims_rotate_between_owners_weighted_by_their_shares(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        for owner in ("heavy", "light", "other"):
            await conn.execute(BACKLOG, {"owner": owner, "n": 2_000})
        await scheduling_settings.set_share(conn, "heavy", 3, actor="operator:ops", note=None)
    taken: Counter[str] = Counter()
    for _ in range(50):
        taken.update(row.owner for row in await claim(engine, transitions, 10))
    assert sum(taken.values()) == 500
    # share 3 : 1 : 1 -> 300 : 100 : 100, give or take a batch.
    assert abs(taken["heavy"] - 300) <= 10, taken
    assert abs(taken["light"] - 100) <= 10, taken
    assert abs(taken["other"] - 100) <= 10, taken


async def running_of(engine: AsyncEngine, key: str) -> tuple[int, int]:
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    f"SELECT (SELECT {KEY_RUNNING} FROM concurrency_keys AS k WHERE key = :key)"
                    " AS counted,"
                    " (SELECT count(*) FROM jobs WHERE concurrency_key = :key"
                    "   AND state IN ('running', 'cancel_requested')) AS actual"
                ),
                {"key": key},
            )
        ).one()
    return int(row.counted), int(row.actual)


async def test_a_concurrency_key_never_runs_more_than_its_limit_and_frees_a_slot_per_end(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await create(engine, transitions, [new("alice", key="press") for _ in range(5)])
    [plain] = await create(engine, transitions, [new("alice")])
    first = await claim(engine, transitions, 10)
    assert Counter(row.concurrency_key for row in first) == {"press": 2, "": 1}
    assert plain in [row.id for row in first]
    assert await claim(engine, transitions, 10) == []
    assert await running_of(engine, "press") == (2, 2)
    done = next(row for row in first if row.concurrency_key == "press")
    async with engine.begin() as conn:
        await transitions.request_cancel(conn, done.id, actor=CLIENT)  # running -> cancel_requested
    assert await claim(engine, transitions, 10) == []  # still running until it ends
    async with engine.begin() as conn:
        stopped = await transitions.stop_canceled(
            conn, done.id, done.current_attempt_id, actor=Actor("worker", "w-fair")
        )
        assert stopped.ok
    assert await running_of(engine, "press") == (1, 1)
    assert len(await claim(engine, transitions, 10)) == 1
    assert await running_of(engine, "press") == (2, 2)


async def test_an_end_not_yet_committed_neither_holds_up_a_claim_of_its_key_nor_lends_room(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """Ends never lock the key's row the claims need: while a job of the key is ending
    in an open transaction, a claim of the key takes the room left at once -- and only
    that, the end's place is free once it commits."""
    await create(engine, transitions, [new("alice", key="press") for _ in range(4)])
    [first] = await claim(engine, transitions, 1)
    async with engine.begin() as conn:
        await transitions.request_cancel(conn, first.id, actor=CLIENT)
    async with engine.begin() as conn:
        stopped = await transitions.stop_canceled(
            conn, first.id, first.current_attempt_id, actor=Actor("worker", "w-fair")
        )
        assert stopped.ok
        during = await asyncio.wait_for(claim(engine, transitions, 10), timeout=10)
        assert len(during) == 1  # the room left beside the ending job, no more
    assert await running_of(engine, "press") == (1, 1)
    assert len(await claim(engine, transitions, 10)) == 1  # the ended job's place
    assert await running_of(engine, "press") == (2, 2)


async def test_concurrent_claims_never_exceed_a_keys_limit(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """Eight claims at once on eight connections: the key's row lock (SKIP LOCKED) lets
    one spend its room; none waits, and together they take exactly the limit."""
    await create(engine, transitions, [new(f"o{i}", key="press") for i in range(40)])
    results = await asyncio.gather(*(claim(engine, transitions, 5) for _ in range(8)))
    claimed = [row for rows in results for row in rows]
    assert len(claimed) == 2
    assert len({row.id for row in claimed}) == 2
    assert await running_of(engine, "press") == (2, 2)


async def test_an_operators_limit_of_a_key_holds_from_the_next_claim(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await create(engine, transitions, [new("alice", key="press") for _ in range(6)])
    async with engine.begin() as conn:
        await scheduling_settings.set_key(
            conn,
            "press",
            scheduling_settings.KeySetting(0, None, None),
            actor="operator:o",
            note=None,
        )
    assert await claim(engine, transitions, 10) == []
    async with engine.begin() as conn:
        await scheduling_settings.set_key(
            conn,
            "press",
            scheduling_settings.KeySetting(4, None, None),
            actor="operator:o",
            note=None,
        )
    assert len(await claim(engine, transitions, 10)) == 4


KEY_DECLARATION = text("""
SELECT declared_limit, max_running, declared_rate, rate FROM concurrency_keys WHERE key = :key
""")


async def test_a_key_an_operator_set_before_any_job_takes_the_first_jobs_declaration(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        await scheduling_settings.set_key(
            conn,
            "press",
            scheduling_settings.KeySetting(5, None, None),
            actor="operator:o",
            note=None,
        )
    await create(engine, transitions, [new("alice", key="press") for _ in range(6)])
    async with engine.connect() as conn:
        row = (await conn.execute(KEY_DECLARATION, {"key": "press"})).one()
    assert tuple(row) == (2, 5, None, None)  # declared 2; the operator's 5 in force
    assert len(await claim(engine, transitions, 10)) == 5
    async with engine.begin() as conn:
        await scheduling_settings.set_key(
            conn,
            "press",
            scheduling_settings.KeySetting(None, None, None),
            actor="operator:o",
            note=None,
        )
    await create(engine, transitions, [new("alice", key="press")])  # declares nothing new
    async with engine.connect() as conn:
        row = (await conn.execute(KEY_DECLARATION, {"key": "press"})).one()
    assert tuple(row) == (2, None, None, None)
    assert await claim(engine, transitions, 10) == []  # five running, the declared limit 2


async def test_a_start_rate_lets_its_starts_per_period_through(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await create(engine, transitions, [new("alice", key="press") for _ in range(6)])
    async with engine.begin() as conn:
        await scheduling_settings.set_key(
            conn,
            "press",
            scheduling_settings.KeySetting(100, 3, 3600.0),
            actor="operator:o",
            note=None,
        )
    assert len(await claim(engine, transitions, 10)) == 3
    assert await claim(engine, transitions, 10) == []


async def test_the_sweeper_drops_empty_lanes_and_a_new_job_brings_its_lane_back(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await create(engine, transitions, [new("alice")])
    [row] = await claim(engine, transitions, 1)

    async def lanes() -> list[str]:
        async with engine.connect() as conn:
            return list((await conn.execute(text("SELECT owner FROM claim_lanes"))).scalars())

    assert await lanes() == ["alice"]
    async with engine.begin() as conn:
        assert await conn.scalar(PRUNE_LANES, {"limit": 100}) == 1
    assert await lanes() == []
    [again] = await create(engine, transitions, [new("alice")])
    assert await lanes() == ["alice"]
    assert [r.id for r in await claim(engine, transitions, 1)] == [again]
    assert row.id != again


async def test_a_creation_adds_every_lane_it_brings_be_it_one_or_several(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """A batch of one lane (several jobs, one owner, kind and key) adds that lane; a batch
    of several adds each, an owner's two keys apart; the lanes a batch finds are kept."""

    async def lanes() -> list[tuple[str, str]]:
        async with engine.connect() as conn:
            found = await conn.execute(
                text("SELECT owner, concurrency_key FROM claim_lanes ORDER BY 1, 2")
            )
            return [(row.owner, row.concurrency_key) for row in found]

    await create(engine, transitions, [new("carol"), new("carol", priority=9), new("carol")])
    assert await lanes() == [("carol", "")]
    await create(engine, transitions, [new("bob", key="k1"), new("bob", key="k2")])
    await create(engine, transitions, [new("carol"), new("dave")])
    assert await lanes() == [("bob", "k1"), ("bob", "k2"), ("carol", ""), ("dave", "")]
    claimed = Counter(row.owner for row in await claim(engine, transitions, 10))
    assert claimed == {"carol": 4, "bob": 2, "dave": 1}


async def test_a_lane_with_queued_work_is_never_pruned(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await create(engine, transitions, [new("alice"), new("bob")])
    await claim(engine, transitions, 1)
    async with engine.begin() as conn:
        pruned = await conn.scalar(PRUNE_LANES, {"limit": 100})
        left = list((await conn.execute(text("SELECT owner FROM claim_lanes"))).scalars())
    assert pruned == 1
    assert len(left) == 1
    [rest] = await claim(engine, transitions, 5)
    assert rest.owner == left[0]


async def test_an_emptied_lane_never_holds_a_claim_back(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    """A lane whose jobs all started stays until the sweeper drops it; a claim of one
    passes over it to the lane that has work, whatever their turns."""
    await create(engine, transitions, [new("alice")])
    await claim(engine, transitions, 1)  # alice's lane: empty, one turn on
    bobs = await create(engine, transitions, [new("bob"), new("bob")])
    taken = [row.id for _ in bobs for row in await claim(engine, transitions, 1)]
    assert taken == bobs
