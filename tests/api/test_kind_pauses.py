"""Pausing a kind: operators only, over HTTP (httpx against the app), with real worker
processes. A paused kind's queued jobs stay queued and say who paused it (``waiting_for``
``paused``), an attempt already running finishes, the pause survives a worker restart,
and a resume lets the jobs run."""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.db.schema import kind_pause_events, kind_pauses
from atlas_jobs._app.lifecycle import JobState
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import NewJob, Transitions
from tests.api.conftest import LiveApi
from tests.api.support import Keys
from tests.api.test_cli import cli
from tests.workers.dbwait import CLIENT, attempt_rows, job_row, wait_for_state
from tests.workers.procs import Fleet, WorkerSettings, fleet

KIND = "demo.gated"
KIND_MODULE = '''
"""demo.gated: runs until the gate file exists."""

from pathlib import Path

from pydantic import BaseModel

from atlas_jobs import Context, Result, kind

GATE = Path({gate!r})


class Gated(BaseModel):
    n: int


@kind("{kind}", version=1, input=Gated, timeout=120)
async def gated(ctx: Context[Gated]) -> Result:
    while not GATE.exists():
        await ctx.sleep(0.05)
    return Result(reference={{"n": ctx.input.n}})
'''


@pytest.fixture
def api_settings(database_url: str, data_dir: Path) -> Settings:
    """A fast refresh of the API's view of the workers and pauses."""
    return Settings(
        DATABASE_URL=database_url,
        data_dir=data_dir,
        signing_secret="test-signing-secret-not-for-production",
        max_wait_seconds=5,
        live_workers_refresh_seconds=0.2,
    )


def start_worker(workers: Fleet, kinds: Path, name: str) -> None:
    workers.extra_env = {
        "PYTHONPATH": str(kinds),
        "ATLAS_KINDS": "gated",
        "ATLAS_BUILTIN_KINDS": "false",
        "ATLAS_KIND_ENTRY_POINTS": "false",
    }
    workers.start(name, concurrency=1)


async def create(engine: AsyncEngine, transitions: Transitions, n: int) -> uuid.UUID:
    new = NewJob(
        owner="alice",
        kind=KIND,
        kind_version=1,
        input={"n": n},
        max_attempts=3,
        max_elapsed_seconds=3600,
    )
    async with engine.begin() as conn:
        created = await transitions.create(conn, new, actor=CLIENT)
    job_id: uuid.UUID = created.job.id
    return job_id


async def states(engine: AsyncEngine, ids: list[uuid.UUID]) -> list[str]:
    return [(await job_row(engine, job_id)).state for job_id in ids]


async def test_a_paused_kind_stays_queued_its_running_attempt_finishes_and_resume_runs_it(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    database_url: str,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    (kinds / "gated.py").write_text(
        textwrap.dedent(KIND_MODULE.format(gate=str(gate), kind=KIND)).lstrip()
    )
    settings = WorkerSettings(prefetch=0, poll_interval_seconds=0.2)
    with fleet(database_url, data_dir, settings) as workers:
        start_worker(workers, kinds, "w-pause-1")
        first = await create(engine, transitions, 1)
        await wait_for_state(engine, first, JobState.RUNNING, timeout=60)

        note = "destination down; resume once it answers"
        paused = await client.post(f"/v1/kinds/{KIND}/pause", json={"note": note}, headers=keys.op)
        assert paused.status_code == 201, paused.text
        pause = paused.json()
        assert (pause["kind"], pause["version"], pause["note"]) == (KIND, None, note)
        assert pause["paused_by"].startswith("operator:")

        held = [await create(engine, transitions, n) for n in (2, 3)]
        gate.touch()  # the attempt that was running when the pause came finishes
        await wait_for_state(engine, first, JobState.SUCCEEDED, timeout=60)
        await asyncio.sleep(1.5)  # several claim rounds of an idle worker
        assert await states(engine, held) == ["queued", "queued"], workers.logs()

        status = (await client.get(f"/v1/jobs/{held[0]}", headers=keys.a)).json()
        assert status["waiting_for"] == {
            "reason": "paused",
            "kind": f"{KIND}@1",
            "by": pause["paused_by"],
            "at": pause["paused_at"],
            "note": note,
            "message": status["waiting_for"]["message"],
        }
        label = present(status, Observation.FRESH).label
        assert label.startswith(f"Queued — paused by {pause['paused_by']} at ")
        assert label.endswith(f" UTC: {note}")
        assert status["waiting_for"]["message"] == label.removeprefix("Queued — ")

        # The pause is in the database, not in a process: a new worker keeps to it.
        for process in workers.processes:
            assert process.terminate() == 0, process.log()
        start_worker(workers, kinds, "w-pause-2")
        await asyncio.sleep(2.0)
        assert await states(engine, held) == ["queued", "queued"], workers.logs()

        resumed = await client.post(
            f"/v1/kinds/{KIND}/resume", json={"note": "destination back"}, headers=keys.op
        )
        assert resumed.status_code == 200, resumed.text
        for job_id in held:
            await wait_for_state(engine, job_id, JobState.SUCCEEDED, timeout=60)
        assert [a.worker_id for a in await attempt_rows(engine, held[0])] == ["w-pause-2"]

    async with engine.connect() as conn:
        recorded = (await conn.execute(select(kind_pause_events))).all()
        left = (await conn.execute(select(kind_pauses))).all()
    assert [(e.action, e.actor, e.note) for e in recorded] == [
        ("pause", pause["paused_by"], note),
        ("resume", pause["paused_by"], "destination back"),
    ]
    assert left == []


async def test_pausing_is_for_operators_and_answers_clear_problems(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    path = "/v1/kinds/atlas.bundle/pause"
    assert (await client.post(path)).status_code == 401
    for headers in (keys.a, keys.rev):
        refused = await client.post(path, headers=headers)
        assert refused.status_code == 403, refused.text
        assert (await client.get("/v1/pauses", headers=headers)).status_code == 403
        assert (
            await client.post("/v1/kinds/atlas.bundle/resume", headers=headers)
        ).status_code == 403

    unknown = await client.post("/v1/kinds/no.such.kind/pause", headers=keys.op)
    assert unknown.status_code == 404
    assert unknown.json()["type"] == "urn:atlas-jobs:problem:kind-not-found"
    assert "known kinds: atlas.bundle" in unknown.json()["detail"]
    bad = await client.post(path, json={"version": 0}, headers=keys.op)
    assert bad.status_code == 422
    assert [".".join(e["loc"]) for e in bad.json()["errors"]] == ["body.version"]
    extra = await client.post(path, json={"versions": 2}, headers=keys.op)
    assert extra.status_code == 422

    not_paused = await client.post("/v1/kinds/atlas.bundle/resume", headers=keys.op)
    assert not_paused.status_code == 404
    assert not_paused.json()["type"] == "urn:atlas-jobs:problem:kind-not-paused"

    first = await client.post(path, json={"note": "first"}, headers=keys.op)
    assert first.status_code == 201
    again = await client.post(path, json={"note": "second"}, headers=keys.op)
    assert again.status_code == 200  # the pause in force is kept as it was
    assert again.json() == first.json()
    one_version = await client.post(path, json={"version": 1}, headers=keys.op)
    assert one_version.status_code == 201
    assert one_version.json()["version"] == 1

    listed: dict[str, Any] = (await client.get("/v1/pauses", headers=keys.op)).json()
    assert [(p["kind"], p["version"], p["note"]) for p in listed["items"]] == [
        ("atlas.bundle", None, "first"),
        ("atlas.bundle", 1, None),
    ]
    assert [(e["action"], e["version"]) for e in listed["events"]] == [
        ("pause", 1),
        ("pause", None),
    ]

    # Each pause is resumed by name: the version's first, then the kind's.
    resumed = await client.post(
        "/v1/kinds/atlas.bundle/resume", json={"version": 1}, headers=keys.op
    )
    assert resumed.status_code == 200
    assert resumed.json()["version"] == 1
    listed = (await client.get("/v1/pauses", headers=keys.op)).json()
    assert [(p["kind"], p["version"]) for p in listed["items"]] == [("atlas.bundle", None)]


async def test_the_cli_pauses_lists_and_resumes_a_kind(
    live_api: LiveApi, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        operator = await create_key(conn, owner="ops", roles=[Role.OPERATOR])
        client_key = await create_key(conn, owner="gail", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": operator}
    paused = cli("pauses", "pause", "atlas.bundle", "--version", "1", "--note", "s3 down", env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("atlas.bundle@1  paused by operator:ops at ")
    assert paused.stdout.rstrip().endswith("  s3 down")
    again = cli("pauses", "pause", "atlas.bundle", "--version", "1", env=env)
    assert again.stdout.startswith("already atlas.bundle@1  paused by operator:ops")
    listed = cli("pauses", "list", env=env)
    assert listed.stdout.splitlines() == [paused.stdout.strip()]

    refused = cli("pauses", "pause", "atlas.bundle", env={**env, "ATLAS_API_KEY": client_key})
    assert refused.returncode == 4, refused.stderr
    assert cli("pauses", "resume", "atlas.bundle", env=env).returncode == 1  # no such pause
    resumed = cli("pauses", "resume", "atlas.bundle", "--version", "1", env=env)
    assert (resumed.returncode, resumed.stdout.strip()) == (0, "resumed atlas.bundle@1")
    empty = cli("pauses", "list", env=env)
    assert (empty.stdout, empty.stderr.strip()) == ("", "no kind is paused")
