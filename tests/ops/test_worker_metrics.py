"""Worker metrics from real processes: under ``atlas-jobs serve`` the API's ``/metrics``
shows what its worker processes recorded (multiprocess mode); a worker on its own
serves them on ``--metrics-port``."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.transitions import Transitions
from tests.api.support import make_keys
from tests.ops.metrics_text import total, value
from tests.support import atlas_process, free_port
from tests.workers.dbwait import bundle_input, create_job, eventually

SECRET = "ops-test-signing-secret"


def env_for(database_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SECRET,
        "ATLAS_BUNDLE_TIME_SCALE": "0.01",
        "ATLAS_POLL_INTERVAL_SECONDS": "0.5",
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "2",
        "ATLAS_METRICS_SAMPLE_SECONDS": "0.2",
        "ATLAS_LOG_FORMAT": "json",
        **extra,
    }


async def test_worker_metrics_are_visible_under_serve(
    database_url: str, engine: AsyncEngine, data_dir: Path, tmp_path: Path
) -> None:
    keys = await make_keys(engine)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with atlas_process(
        ["serve", "--port", str(port), "--workers", "2", "--concurrency", "2"],
        env=env_for(database_url, data_dir),
        log_path=tmp_path / "serve.log",
        ready_url=f"{base}/readyz",
    ):
        async with httpx.AsyncClient(base_url=base, headers=keys.a) as http:
            for preset in ("coast", "reef"):
                created = await http.post(
                    "/v1/jobs", json={"kind": "atlas.bundle", "input": bundle_input(preset)}
                )
                assert created.status_code == 202, created.text

            async def scrape() -> str:
                answer = await http.get("/metrics")
                assert answer.status_code == 200
                return answer.text

            def both_ended(text: str) -> bool:
                return [
                    value(
                        text,
                        "atlas_attempts_total",
                        kind="atlas.bundle",
                        outcome=outcome,
                        process="workers",
                    )
                    for outcome in ("succeeded", "failed")
                ] == [1.0, 1.0] and (
                    # sampled every few seconds by each worker
                    value(
                        text, "atlas_db_pool_connections_in_use", pool="worker", process="workers"
                    )
                    is not None
                )

            text = await eventually(scrape, both_ended, timeout=120, what="both jobs to end")
        # The workers' own families, summed over the worker processes...
        for state in ("succeeded", "failed"):
            assert (
                value(
                    text,
                    "atlas_job_duration_seconds_count",
                    kind="atlas.bundle",
                    state=state,
                    process="workers",
                )
                == 1
            )
        assert (
            value(
                text, "atlas_job_start_delay_seconds_count", kind="atlas.bundle", process="workers"
            )
            == 2
        )
        assert total(text, "atlas_transitions_total", transition="publish", process="workers") == 1
        # ... beside the API's, labelled apart (each family given once: the parser checks).
        assert (
            value(
                text,
                "atlas_http_requests_total",
                method="POST",
                route="/v1/jobs",
                status="202",
                process="api",
            )
            == 2
        )


async def test_a_worker_alone_serves_its_metrics_on_a_port(
    database_url: str,
    engine: AsyncEngine,
    transitions: Transitions,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    job_id = await create_job(engine, transitions, "atlas.noop", {"tag": "metrics"})
    with atlas_process(
        ["worker", "--concurrency", "1", "--metrics-port", str(port)],
        env=env_for(database_url, data_dir),
        log_path=tmp_path / "worker.log",
        ready_url=url,
    ):
        async with httpx.AsyncClient() as http:

            async def scrape() -> str:
                return (await http.get(url)).text

            text = await eventually(
                scrape,
                lambda text: (
                    value(text, "atlas_attempts_total", kind="atlas.noop", outcome="succeeded") == 1
                ),
                timeout=60,
                what=f"job {job_id} to succeed",
            )
    assert (
        value(text, "atlas_job_duration_seconds_count", kind="atlas.noop", state="succeeded") == 1
    )
