"""Retention and the orphan sweep on the S3-compatible store (a real moto server):
the sweeper deletes the objects of results past retention, and those a crash left
behind, and never those of an available result or of a publication in flight."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.objectstore import S3Store
from atlas_jobs._app.transitions import Transitions
from tests.factory import JobFactory
from tests.objectstore import ObjectServer
from atlas_jobs._workers.sweeper import Sweeper


def _publish(store: S3Store, owner: str, job_id: uuid.UUID) -> None:
    store.write_staged(job_id, "bundle.zip", b"zip")
    store.publish(owner, job_id)


async def test_the_sweeper_deletes_expired_and_orphaned_objects(
    engine: AsyncEngine,
    clock: Clock,
    transitions: Transitions,
    jobs: JobFactory,
    object_server: ObjectServer,
) -> None:
    bucket = object_server.new_bucket()
    store = S3Store(object_server.client(), bucket)
    expiring = await jobs.make(JobState.SUCCEEDED)  # published with a 60 s retention
    _publish(store, "alice", expiring.id)
    crashed = await jobs.make(JobState.SUCCEEDED)
    _publish(store, "alice", crashed.id)
    clock.advance(61)
    kept = await jobs.make(JobState.SUCCEEDED)  # still available
    _publish(store, "alice", kept.id)
    in_flight = await jobs.make(JobState.RUNNING)  # copied, commit not yet made
    _publish(store, "bob", in_flight.id)
    unknown = uuid.uuid4()  # no job row references it
    _publish(store, "carol", unknown)
    async with engine.begin() as conn:  # expiry committed, then the process died
        assert (await transitions.expire_result(conn, crashed.id)).ok

    report = await Sweeper(engine, transitions, store).run_once()

    assert report.expired == 1
    assert (await jobs.row(expiring.id)).delivery_state == "expired"
    assert object_server.keys(bucket) == sorted(
        [
            f"published/alice/{kept.id}/bundle.zip",
            f"published/bob/{in_flight.id}/bundle.zip",
        ]
    )
