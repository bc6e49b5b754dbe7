"""A database connection lost in the middle of a publication is an uncertain outcome,
not a failed publication.

The publication of a job with files moves them into the owner's area, then writes the
job's new state in the same transaction. When the worker's connection is reset between
the two (the transaction rolls back), the job must not end ``failed`` with
``publication_failed`` (nothing is wrong with the store): the lease runs out, the reaper
rescues the job, and the next attempt publishes it, once.

Deterministic: a proxy between the worker process and PostgreSQL resets the connection
instead of forwarding the first publication statement (the one statement marked by the
history literal ``'publish'``). The error the worker sees here is the driver's
(``ConnectionDoesNotExistError``, wrapped by SQLAlchemy); the raw ``OSError`` of a
*connect* that fails at the publication's checkout (what chaos scenario 3 found, fixed
by catching only ``StorageError``) is not reproduced by this test.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from chaos.proxy import TcpProxy
from tests.workers.dbwait import attempt_rows, create_bundle, history, wait_for_state
from tests.workers.procs import Fleet, WorkerSettings

PUBLISH_MARKER = b"'publish'"


async def test_a_connection_reset_during_a_publication_is_retried_not_failed(
    engine: AsyncEngine, transitions: Transitions, database_url: str, data_dir: Path
) -> None:
    url = make_url(database_url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432, watch_marker=PUBLISH_MARKER)
    await proxy.start()
    proxy.reset_on_marker = 1
    fleet = Fleet(
        url.set(port=proxy.port).render_as_string(hide_password=False),
        data_dir,
        WorkerSettings(lease_seconds=2.0, reaper_interval_seconds=0.5),
    )
    try:
        job_id = await create_bundle(engine, transitions, "coast")
        worker = fleet.start("w", concurrency=1)
        final = await wait_for_state(
            engine, job_id, JobState.SUCCEEDED, JobState.FAILED, timeout=90
        )
        log = worker.log()
    finally:
        fleet.close()
        await proxy.close()

    assert proxy.counters.marker_resets == 1, "the fault never happened"
    assert final.state == JobState.SUCCEEDED.value, (final.state, final.error, log[-3000:])
    assert "job.publication_failed" not in log
    reasons = [row.reason for row in await history(engine, job_id)]
    assert "publication_failed" not in reasons
    attempts = await attempt_rows(engine, job_id)
    # The first attempt lost its connection before its publication reached the server;
    # the rescue ended it, and the second attempt published.
    assert [a.number for a in attempts] == [1, 2]
    assert final.delivery_state == "available"
    assert final.result_ref["files"], final.result_ref
