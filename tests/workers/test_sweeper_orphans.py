"""Files of expired results do not leak when the sweeper crashes between marking a
result ``expired`` and removing its files (a reliability finding)."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.sweeper import Sweeper
from tests.factory import JobFactory


def _publish(store: FilesystemStore, owner: str, job_id: uuid.UUID) -> None:
    store.write_staged(job_id, "bundle.zip", b"zip")
    store.publish(owner, job_id)


async def test_files_left_by_a_crash_after_expiry_are_removed_by_the_next_sweep(
    engine: AsyncEngine, clock: Clock, transitions: Transitions, jobs: JobFactory, data_dir: Path
) -> None:
    store = FilesystemStore(data_dir / "results")
    crashed = await jobs.make(JobState.SUCCEEDED)  # published with a 60 s retention
    _publish(store, "alice", crashed.id)
    clock.advance(61)
    kept = await jobs.make(JobState.SUCCEEDED)  # still available
    _publish(store, "alice", kept.id)
    in_flight = await jobs.make(JobState.RUNNING)  # renamed, commit not yet made
    _publish(store, "bob", in_flight.id)
    unknown = uuid.uuid4()  # no job row references it
    _publish(store, "carol", unknown)
    # The crash: the expiry committed, the process died before removing the files.
    async with engine.begin() as conn:
        assert (await transitions.expire_result(conn, crashed.id)).ok
    assert (await jobs.row(crashed.id)).delivery_state == "expired"
    assert store.published_path("alice", crashed.id, "bundle.zip") is not None

    report = await Sweeper(engine, transitions, store).run_once()

    assert report.expired == 0  # nothing newly expired: the files were the leak
    assert store.published_path("alice", crashed.id, "bundle.zip") is None
    assert store.published_path("carol", unknown, "bundle.zip") is None
    assert store.published_path("alice", kept.id, "bundle.zip") is not None
    assert store.published_path("bob", in_flight.id, "bundle.zip") is not None
    assert {e.job_id for e in store.published_entries()} == {kept.id, in_flight.id}
