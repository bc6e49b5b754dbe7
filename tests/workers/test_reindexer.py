"""The reindexer (:mod:`atlas_jobs._workers.reindexer`): an index of ``jobs`` that outgrew the
table's rows is rebuilt concurrently, and nothing else is; one process at a time; an
interrupted rebuild's leftover is dropped. Sizes are small: the bounds are passed in."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import single_statements
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.pool import WorkerPool
from atlas_jobs._workers.reindexer import Reindexer
from atlas_jobs._workers.sweeper import Sweeper
from tests.workers.bulk import NOOP, PRODUCER

BACKLOG = 20_000
KEPT = 100
SMALL = {"min_bytes": 64 * 1024, "bytes_per_row": 512}  # 100 rows: bound 64 KiB

INDEXES = text("""
SELECT x.relname AS name, pg_relation_size(i.indexrelid) AS bytes, i.indisvalid AS valid
  FROM pg_index AS i JOIN pg_class AS x ON x.oid = i.indexrelid
 WHERE i.indrelid = 'jobs'::regclass
""")


async def _indexes(engine: AsyncEngine) -> dict[str, tuple[int, bool]]:
    async with engine.connect() as conn:
        return {r.name: (int(r.bytes), bool(r.valid)) for r in await conn.execute(INDEXES)}


async def _drained_backlog(engine: AsyncEngine, transitions: Transitions, kept: int) -> None:
    """A backlog of BACKLOG queued jobs, all but ``kept`` gone again, then VACUUM: the
    indexes keep the backlog's size (a B-tree never shrinks)."""
    async with engine.begin() as conn:
        await transitions.create_many(conn, [NOOP] * BACKLOG, actor=PRODUCER)
        # With their history, as the pruner deletes (job_history has no foreign key).
        await conn.execute(
            text(
                "WITH gone AS (DELETE FROM jobs WHERE seq > (SELECT min(seq) FROM jobs) + :kept"
                " RETURNING id) DELETE FROM job_history WHERE job_id IN (SELECT id FROM gone)"
            ),
            {"kept": kept - 1},
        )
    async with single_statements(engine).connect() as conn:
        await conn.execute(text("VACUUM ANALYZE jobs"))


async def test_a_bloated_index_is_rebuilt_smaller_and_a_fitting_one_is_left_alone(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _drained_backlog(engine, transitions, KEPT)
    before = await _indexes(engine)
    assert before["pk_jobs"][0] > SMALL["min_bytes"]  # the backlog's size, kept

    # The shipped bounds (64 MiB at least): nothing here is bloated, nothing is touched.
    assert await Reindexer(engine).run_once() == []
    assert await _indexes(engine) == before

    rebuilt = await Reindexer(engine, **SMALL).run_once()

    names = {r.index for r in rebuilt}
    assert {"pk_jobs", "ix_jobs_owner_seq", "ix_jobs_claimable"} <= names
    assert all(r.live_rows == KEPT for r in rebuilt)
    after = await _indexes(engine)
    assert set(after) == set(before)  # same names, all valid, no leftovers
    assert all(valid for _, valid in after.values())
    for r in rebuilt:
        assert r.bytes_before == before[r.index][0]
        assert r.bytes_after == after[r.index][0] < r.bytes_before / 4
    for name in set(before) - names:  # the small partial indexes were not bloated
        assert after[name][0] == before[name][0] <= SMALL["min_bytes"]
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM jobs"))).scalar_one() == KEPT

    # Rebuilt: within the bound now, so the next pass has nothing to do.
    assert await Reindexer(engine, **SMALL).run_once() == []


async def test_indexes_that_fit_their_rows_are_not_rebuilt(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _drained_backlog(engine, transitions, BACKLOG)  # nothing deleted: no bloat
    before = await _indexes(engine)
    assert max(size for size, _ in before.values()) > SMALL["min_bytes"]

    assert await Reindexer(engine, **SMALL).run_once() == []
    assert await _indexes(engine) == before


async def test_one_process_at_a_time_another_holder_of_the_lock_means_nothing_to_do(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _drained_backlog(engine, transitions, KEPT)
    before = await _indexes(engine)
    async with single_statements(engine).connect() as other:
        lock = "SELECT pg_advisory_lock(hashtextextended('atlas.reindex.jobs', 0))"
        await other.execute(text(lock))
        assert await Reindexer(engine, **SMALL).run_once() == []
        assert await _indexes(engine) == before
        await other.execute(
            text("SELECT pg_advisory_unlock(hashtextextended('atlas.reindex.jobs', 0))")
        )
    assert await Reindexer(engine, **SMALL).run_once() != []


async def test_an_interrupted_rebuilds_invalid_leftover_is_dropped(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    await _drained_backlog(engine, transitions, KEPT)
    # A failed concurrent build leaves an invalid index behind, as an interrupted
    # REINDEX CONCURRENTLY leaves "<name>_ccnew" (every write would keep maintaining it).
    async with single_statements(engine).connect() as conn:
        with pytest.raises(Exception, match="could not create unique index"):
            await conn.execute(
                text("CREATE UNIQUE INDEX CONCURRENTLY ix_jobs_owner_seq_ccnew ON jobs (owner)")
            )
    assert (await _indexes(engine))["ix_jobs_owner_seq_ccnew"][1] is False

    await Reindexer(engine).run_once()  # nothing bloated past the shipped bound

    assert "ix_jobs_owner_seq_ccnew" not in await _indexes(engine)


async def test_the_sweeper_rebuilds_when_due_and_then_waits_its_interval(
    engine: AsyncEngine, transitions: Transitions, store: FilesystemStore
) -> None:
    await _drained_backlog(engine, transitions, KEPT)
    sweeper = Sweeper(
        engine, transitions, store, reindexer=Reindexer(engine, check_seconds=3600, **SMALL)
    )

    assert (await sweeper.run_once()).reindexed >= 3
    await _drained_backlog(engine, transitions, KEPT)  # bloated again at once
    assert (await sweeper.run_once()).reindexed == 0  # not due for an hour
    assert Reindexer(engine).min_bytes == 64 * 2**20  # the default bound


async def test_the_pool_takes_the_bounds_from_its_settings_and_zero_turns_it_off(
    engine: AsyncEngine, transitions: Transitions, store: FilesystemStore, database_url: str
) -> None:
    base = Settings(data_dir=store.root.parent)
    tuned = base.model_copy(
        update={
            "index_rebuild_min_mb": 1,
            "index_rebuild_bytes_per_row": 300,
            "index_rebuild_check_seconds": 7.5,
        }
    )
    pools = [
        WorkerPool(s, database_url=database_url, concurrency=1, handlers={})
        for s in (tuned, base.model_copy(update={"index_rebuild_min_mb": 0}), base)
    ]
    try:
        reindexer = pools[0].maintenance.sweeper.reindexer
        assert reindexer is not None
        assert (reindexer.min_bytes, reindexer.bytes_per_row, reindexer.check_seconds) == (
            2**20,
            300,
            7.5,
        )
        off = pools[1].maintenance.sweeper
        assert off.reindexer is None
        assert (await off.run_once()).reindexed == 0  # a pass without it still runs
        shipped = pools[2].maintenance.sweeper.reindexer
        assert shipped is not None
        assert shipped.min_bytes == 64 * 2**20
    finally:
        for pool in pools:
            await pool.engine.dispose()
            await pool.heartbeat_engine.dispose()
