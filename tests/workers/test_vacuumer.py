"""The vacuumer (:mod:`atlas_jobs._workers.vacuumer`): a hot table past its bound of dead row
versions is vacuumed at once, and nothing else is; one process at a time; the pool takes the
bound from its settings, and 0 turns it off. Sizes are small: the bound is passed in."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.pool import WorkerPool
from atlas_jobs._workers.sweeper import Sweeper
from atlas_jobs._workers.vacuumer import Vacuumer
from tests.workers.bulk import NOOP, PRODUCER
from tests.workers.dbwait import eventually

CHURNED = 400
STATS = text("""
SELECT relname AS name, n_dead_tup AS dead, vacuum_count AS vacuums
  FROM pg_stat_user_tables
 WHERE relname IN ('jobs', 'job_history', 'attempts')
""")


async def _stats(engine: AsyncEngine) -> dict[str, tuple[int, int]]:
    async with engine.connect() as conn:
        await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        return {r.name: (int(r.dead), int(r.vacuums)) for r in await conn.execute(STATS)}


async def _churned(engine: AsyncEngine, transitions: Transitions) -> dict[str, tuple[int, int]]:
    """CHURNED jobs created and updated twice (dead versions in ``jobs``: the updated
    column is indexed, so no update is HOT), then the statistics once they report at
    least CHURNED dead versions."""
    async with engine.begin() as conn:
        await transitions.create_many(conn, [NOOP] * CHURNED, actor=PRODUCER)
    for _ in range(2):
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE jobs SET available_at = available_at + interval '1 microsecond'")
            )
    return await eventually(
        lambda: _stats(engine),
        lambda stats: stats["jobs"][0] >= CHURNED,
        timeout=30,
        what="the statistics to report the dead versions",
    )


async def test_a_table_past_its_bound_is_vacuumed_and_one_below_is_not(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    before = await _churned(engine, transitions)

    vacuumed = await Vacuumer(engine, dead_rows=CHURNED).run_once()

    assert vacuumed == ["jobs"]  # job_history and attempts hold no dead versions
    after = await eventually(
        lambda: _stats(engine),
        lambda stats: stats["jobs"][1] > before["jobs"][1],
        timeout=30,
        what="the vacuum in the statistics",
    )
    assert after["jobs"][0] < CHURNED // 2  # its dead versions are gone
    assert after["job_history"][1] == before["job_history"][1]
    assert after["attempts"][1] == before["attempts"][1]


async def test_below_the_bound_nothing_is_vacuumed(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _churned(engine, transitions)
    assert await Vacuumer(engine, dead_rows=100 * CHURNED).run_once() == []


async def test_one_process_at_a_time_another_holder_of_the_lock_means_nothing_to_do(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _churned(engine, transitions)
    name = "hashtextextended('atlas.vacuum.hot', 0)"
    async with single_statements(engine).connect() as other:
        await other.execute(text(f"SELECT pg_advisory_lock({name})"))
        assert await Vacuumer(engine, dead_rows=CHURNED).run_once() == []
        await other.execute(text(f"SELECT pg_advisory_unlock({name})"))
    assert await Vacuumer(engine, dead_rows=CHURNED).run_once() == ["jobs"]


async def test_the_sweeper_vacuums_when_due_and_then_waits_its_interval(
    engine: AsyncEngine, transitions: Transitions, store: FilesystemStore
) -> None:
    await _churned(engine, transitions)
    vacuumer = Vacuumer(engine, dead_rows=CHURNED, check_seconds=3600)
    sweeper = Sweeper(engine, transitions, store, vacuumer=vacuumer)

    assert (await sweeper.run_once()).vacuumed == 1
    await _churned(engine, transitions)  # past the bound again at once
    assert (await sweeper.run_once()).vacuumed == 0  # not due for an hour


async def test_the_pool_takes_the_bound_from_its_settings_and_zero_turns_it_off(
    store: FilesystemStore, database_url: str
) -> None:
    base = Settings(data_dir=store.root.parent)
    tuned = base.model_copy(update={"vacuum_dead_rows": 1234, "vacuum_check_seconds": 2.5})
    pools = [
        WorkerPool(s, database_url=database_url, concurrency=1, handlers={})
        for s in (tuned, base.model_copy(update={"vacuum_dead_rows": 0}), base)
    ]
    try:
        vacuumer = pools[0].maintenance.sweeper.vacuumer
        assert vacuumer is not None
        assert (vacuumer.dead_rows, vacuumer.check_seconds) == (1234, 2.5)
        assert pools[1].maintenance.sweeper.vacuumer is None
        shipped = pools[2].maintenance.sweeper.vacuumer
        assert shipped is not None
        assert shipped.dead_rows == 50_000
    finally:
        for pool in pools:
            await pool.engine.dispose()
            await pool.heartbeat_engine.dispose()
