"""The worker process runs on uvloop (workers/eventloop.py), as the API does under
uvicorn, and does its work there: a job announced by NOTIFY is claimed, run and
published by a real ``atlas-jobs worker`` process on that loop."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.transitions import Transitions
from tests.workers.dbwait import attempt_rows, create_job, eventually, wait_for_state
from tests.workers.procs import fleet
from atlas_jobs._workers import eventloop


def test_run_drives_the_coroutine_on_uvloop() -> None:
    async def which() -> str:
        await asyncio.sleep(0)
        return eventloop.running_loop_name()

    assert eventloop.run(which()) == "uvloop"


async def test_a_worker_process_runs_jobs_on_uvloop(
    database_url: str, data_dir: Path, engine: AsyncEngine, transitions: Transitions
) -> None:
    with fleet(database_url, data_dir) as workers:
        workers.extra_env = {"ATLAS_LOG_FORMAT": "json"}
        worker = workers.start("loop-1", concurrency=1)

        def started() -> list[dict[str, object]]:
            lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
            return [line for line in lines if line.get("event") == "worker.started"]

        [line] = await eventually(
            lambda: asyncio.sleep(0, result=started()), bool, timeout=60, what="worker.started"
        )
        assert line["event_loop"] == "uvloop", worker.log()
        assert line["worker_id"] == "loop-1"

        job_id = await create_job(engine, transitions, "atlas.noop", {"tag": "on-uvloop"})
        await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
        [attempt] = await attempt_rows(engine, job_id)
        assert (attempt.worker_id, attempt.outcome) == ("loop-1", "succeeded")
        assert worker.terminate(timeout=30) == 0, worker.log()
