"""``GET /v1/kinds``, the worker registry behind it, and ``waiting_for`` on a queued job
no live worker serves: against a real PostgreSQL, over HTTP (httpx against the app),
with real worker processes where liveness matters."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import workers
from atlas_jobs._app.db.schema import worker_processes
from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from atlas_jobs._workers.sweeper import Sweeper
from tests.api.conftest import LiveApi
from tests.api.support import Keys
from tests.support import REPO
from tests.workers.procs import WorkerSettings, fleet

T = TypeVar("T")

BEAT = 0.3
WINDOW = 1.5
REFRESH = 0.2


@pytest.fixture
def api_settings(database_url: str, data_dir: Path) -> Settings:
    """The API of these tests: a short live window and a fast refresh of its view."""
    return Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret="test-signing-secret-not-for-production",
        max_wait_seconds=5,
        worker_heartbeat_seconds=BEAT,
        worker_live_window_seconds=WINDOW,
        live_workers_refresh_seconds=REFRESH,
    )


@pytest.fixture
async def app(api_settings: Settings, clock: Clock) -> AsyncIterator[FastAPI]:
    application = create_app(api_settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


async def eventually(
    read: Callable[[], Awaitable[T]], check: Callable[[T], bool], what: str, seconds: float = 20
) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = await read()
        if check(found):
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}; last: {found!r}"
        await asyncio.sleep(0.1)


def by_name(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {kind["name"]: kind for kind in body["kinds"]}


def live_of(body: dict[str, Any], name: str, version: int) -> int | None:
    for entry in by_name(body).get(name, {}).get("versions", []):
        if entry["version"] == version:
            return int(entry["live_workers"])
    return None


async def register(engine: AsyncEngine, worker_id: str, serves: list[str]) -> None:
    """A registry row as a worker process of another deployment writes it."""
    async with engine.begin() as conn:
        await workers.beat(
            conn,
            Clock(),
            worker_id=worker_id,
            host="elsewhere",
            pid=4242,
            serves=serves,
            concurrency=2,
        )


async def registry_ids(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set((await conn.execute(select(worker_processes.c.worker_id))).scalars())


async def test_kinds_lists_every_built_in_kind_with_no_live_worker(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    assert (await client.get("/v1/kinds")).status_code == 401
    for headers in (keys.a, keys.op, keys.rev):  # any authenticated role
        answer = await client.get("/v1/kinds", headers=headers)
        assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [kind["name"] for kind in body["kinds"]] == sorted(KINDS)
    for kind in body["kinds"]:
        spec = KINDS[kind["name"]]
        assert kind["version"] == spec.version
        assert kind["description"] == spec.summary
        assert kind["input_schema"] == spec.input_model.model_json_schema()
        assert kind["versions"] == [{"version": spec.version, "accepted": True, "live_workers": 0}]
        assert kind["concurrency"] is None  # no built-in kind declares one
    assert set(by_name(body)["atlas.bundle"]["input_schema"]["properties"]) >= {"preset", "pages"}


async def test_a_worker_process_is_live_while_it_beats_and_not_after(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    database_url: str,
    data_dir: Path,
) -> None:
    """A real worker process: counted once it registered, 0 at once after a clean stop
    (its row is deleted); a killed one keeps its row but is not counted once its
    heartbeat is older than the live window, and the sweeper forgets it later."""

    async def kinds() -> dict[str, Any]:
        answer = await client.get("/v1/kinds", headers=keys.a)
        assert answer.status_code == 200
        body: dict[str, Any] = answer.json()
        return body

    env = {
        "ATLAS_WORKER_HEARTBEAT_SECONDS": str(BEAT),
        "ATLAS_WORKER_LIVE_WINDOW_SECONDS": str(WINDOW),
    }
    with fleet(database_url, data_dir, WorkerSettings()) as workers_:
        workers_.extra_env = env
        first = workers_.start("kinds-w1", concurrency=2)
        body = await eventually(kinds, lambda b: live_of(b, "atlas.bundle", 1) == 1, "w1 live")
        assert {live_of(body, name, 1) for name in KINDS} == {1}  # it serves every kind
        async with engine.connect() as conn:
            row = (await conn.execute(select(worker_processes))).one()
        assert (row.worker_id, row.pid, row.concurrency) == ("kinds-w1", first.pid, 2)
        assert set(row.serves) == {f"{name}@1" for name in KINDS}

        assert first.terminate() == 0  # a clean stop withdraws the row
        assert await registry_ids(engine) == set()
        await eventually(kinds, lambda b: live_of(b, "atlas.bundle", 1) == 0, "w1 gone")

        second = workers_.start("kinds-w2", concurrency=1)
        await eventually(kinds, lambda b: live_of(b, "atlas.bundle", 1) == 1, "w2 live")
        second.kill()  # no clean shutdown: the row stays and ages
        assert await registry_ids(engine) == {"kinds-w2"}
        killed_at = time.monotonic()
        await eventually(kinds, lambda b: live_of(b, "atlas.bundle", 1) == 0, "w2 aged out")
        assert time.monotonic() - killed_at >= WINDOW - BEAT - REFRESH

    sweeper = Sweeper(
        engine,
        Transitions(Clock(), lease_seconds=10),
        FilesystemStore(data_dir / "results"),
        forget_workers_seconds=WINDOW,
    )
    assert (await sweeper.run_once()).forgotten_workers == 1
    assert await registry_ids(engine) == set()


async def test_a_queued_job_no_live_worker_serves_says_so_wherever_its_status_is_read(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        created = await transitions.create(
            conn,
            NewJob(
                owner="alice",
                kind="thumbnail.render",
                kind_version=2,
                input={},
                max_attempts=3,
                max_elapsed_seconds=600,
            ),
            actor=Actor("client", "alice"),
        )
    path = f"/v1/jobs/{created.job.id}"
    waiting = {
        "reason": "no_worker",
        "kind": "thumbnail.render@2",
        "message": "no live worker serves thumbnail.render@2",
    }

    async def read() -> httpx.Response:
        return await client.get(path, headers=keys.a)

    answer = await eventually(read, lambda r: r.json()["waiting_for"] is not None, "the view")
    status = answer.json()
    assert status["state"] == "queued"
    assert status["waiting_for"] == waiting
    assert present(status, Observation.FRESH).label == (
        "Queued — no worker serves thumbnail.render@2"
    )
    tag = answer.headers["etag"]
    assert tag == 'W/"1-no_worker"'
    held = {**keys.a, "If-None-Match": tag}
    assert (await client.get(path, headers=held)).status_code == 304
    long_poll = await client.get(path, headers={**held, "Prefer": "wait=1"})
    assert long_poll.status_code == 304
    listed = (await client.get("/v1/jobs", headers=keys.a)).json()["items"]
    assert [item["waiting_for"] for item in listed] == [waiting]
    from_feed = await client.get(path, headers={**keys.a, "Prefer": "wait=1"})  # the feed's body
    assert from_feed.status_code == 200
    assert from_feed.json()["waiting_for"] == waiting
    assert from_feed.headers["etag"] == tag

    # A worker of a deployment the API does not know yet serves it: the job no longer
    # waits for one, the ETag changes with the body, and GET /v1/kinds shows that fleet.
    await register(engine, "v2-fleet", ["thumbnail.render@2", "atlas.bundle@2"])
    answer = await eventually(read, lambda r: r.json()["waiting_for"] is None, "a live v2")
    assert answer.headers["etag"] == 'W/"1"'
    assert (await client.get(path, headers=held)).status_code == 200
    assert present(answer.json(), Observation.FRESH).label == "Queued"
    kinds = by_name((await client.get("/v1/kinds", headers=keys.a)).json())
    assert kinds["thumbnail.render"] == {
        "name": "thumbnail.render",
        "version": None,
        "description": None,
        "input_schema": None,
        "versions": [{"version": 2, "accepted": False, "live_workers": 1}],
        "concurrency": None,
    }
    assert kinds["atlas.bundle"]["version"] == 1
    assert kinds["atlas.bundle"]["versions"] == [
        {"version": 1, "accepted": True, "live_workers": 0},
        {"version": 2, "accepted": False, "live_workers": 1},
    ]


async def test_jobs_not_queued_never_wait_for_a_worker(
    client: httpx.AsyncClient, keys: Keys, app: FastAPI
) -> None:
    created = await client.post(
        "/v1/jobs",
        json={"kind": "atlas.noop", "input": {}},
        headers=keys.a,
    )
    assert created.status_code == 202
    job_id = uuid.UUID(created.json()["id"])
    canceled = await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)
    assert canceled.status_code == 202
    assert canceled.json()["state"] == "canceled"
    assert canceled.json()["waiting_for"] is None
    assert "no_worker" not in canceled.headers["etag"]


async def test_the_kinds_verb_prints_kinds_versions_and_live_workers(
    live_api: LiveApi, engine: AsyncEngine, database_url: str, data_dir: Path
) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    await register(engine, "v2-fleet", ["atlas.bundle@2"])
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_URL": live_api.url,
        "ATLAS_API_KEY": key,
    }

    def kinds_verb() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "atlas_jobs._app.cli", "kinds"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )

    async def shown() -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(kinds_verb)

    done = await eventually(shown, lambda r: "(workers only)" in r.stdout, "the v2 fleet", 30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split() == ["KIND", "VERSION", "LIVE", "WORKERS", "DESCRIPTION"]
    bundle = KINDS["atlas.bundle"]
    expected = [
        ("atlas.bundle", "v1 *", "0", bundle.summary),
        ("atlas.bundle", "v2 (workers only)", "1", bundle.summary),
        *[
            (name, "v1 *", "0", KINDS[name].summary)
            for name in sorted(KINDS)
            if name != "atlas.bundle"
        ],
    ]
    assert len(rows) == len(expected)
    # aligned columns: every row's version, count and description start where the header's do
    starts = [header.index(title) for title in ("VERSION", "LIVE WORKERS", "DESCRIPTION")]
    for row, (name, version, live, description) in zip(rows, expected, strict=True):
        assert row.startswith(name)
        assert row[starts[0] :].startswith(version)
        assert row[starts[1] : starts[2]].strip() == live
        assert row[starts[2] :] == description
