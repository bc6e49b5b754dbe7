"""``atlas-jobs keys create`` and the client verbs against a live API."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, authenticate, create_key, open_session
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import jobs
from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, Driver
from tests.api.test_waiting_reasons import NOOP, noop, register
from tests.api.test_waiting_reasons import created as stored
from tests.support import REPO, atlas_process, free_port


async def held_by_its_key(url: str, key: str, job_id: str) -> None:
    """Until the API's view of the keys (refreshed every few seconds) holds the job."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        for _ in range(100):
            waiting = (await http.get(f"/v1/jobs/{job_id}")).json()["waiting_for"]
            if waiting is not None and waiting["reason"] == "concurrency":
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} is not held by its key: {waiting}")


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **env},
    )


async def test_keys_create_then_client_verbs_over_http(
    live_api: LiveApi, database_url: str, data_dir: Path, driver: Driver, tmp_path: Path
) -> None:
    base = {"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)}
    created = cli("keys", "create", "--owner", "carol", "--role", "client", env=base)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("atlas_")
    listed = cli("keys", "list", "--owner", "carol", env=base)
    assert "carol" in listed.stdout
    assert key not in listed.stdout  # only the prefix is ever shown again

    client_env = {**base, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    submitted = cli(
        "submit",
        "--kind",
        "atlas.bundle",
        "--input",
        json.dumps(BUNDLE_INPUT),
        "--json",
        env=client_env,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["state"] == "queued"
    job_id = job["id"]

    shown = cli("status", job_id, "--json", env=client_env)
    assert json.loads(shown.stdout)["id"] == job_id
    facts = cli("status", job_id, env=client_env)
    # (no worker process runs beside this API: the label says what holds the job)
    assert facts.stdout.splitlines()[0] == "Queued — no worker serves atlas.bundle@1"
    assert job_id in facts.stdout

    # a job its concurrency key holds: a live worker serves atlas.noop, and the one slot
    # of the key "press" is taken by the job claimed before it
    await register(driver.engine, Clock())
    await stored(driver.engine, driver.t, noop("carol", "press"))
    held = await stored(driver.engine, driver.t, noop("carol", "press"))
    async with driver.engine.begin() as conn:
        await driver.t.claim(conn, worker_id="w-live", handlers=[NOOP], limit=5)
    await held_by_its_key(live_api.url, key, held)
    slot = cli("status", held, env=client_env)
    assert slot.stdout.splitlines()[0] == "Queued — waiting for a slot in press (1 of 1 busy)"

    not_ready = cli("result", job_id, env=client_env)
    assert not_ready.returncode == 1
    assert "HTTP 409" in not_ready.stderr

    await driver.succeed(uuid.UUID(job_id), "carol", {"bundle.zip": b"zip-bytes"})
    watched = cli("watch", job_id, "--wait", "1", env=client_env)
    assert watched.returncode == 0, watched.stderr
    assert "Ready — download" in watched.stdout

    out = tmp_path / "out"
    fetched = cli("result", job_id, "-o", str(out), env=client_env)
    assert fetched.returncode == 0, fetched.stderr
    assert (out / "bundle.zip").read_bytes() == b"zip-bytes"
    (out / "bundle.zip").write_bytes(b"mine")
    kept = cli("result", job_id, "-o", str(out), env=client_env)
    assert kept.returncode == 2
    assert "--force" in kept.stderr
    assert (out / "bundle.zip").read_bytes() == b"mine"  # never overwritten silently
    forced = cli("result", job_id, "-o", str(out), "--force", env=client_env)
    assert forced.returncode == 0, forced.stderr
    assert (out / "bundle.zip").read_bytes() == b"zip-bytes"

    listed_jobs = cli("list", env=client_env)
    assert listed_jobs.returncode == 0
    assert f"{job_id}\tatlas.bundle\tsucceeded\tReady — download" in listed_jobs.stdout
    assert "Ready — download" in listed_jobs.stdout
    moves = cli("history", job_id, env=client_env)
    assert moves.returncode == 0
    first = moves.stdout.splitlines()[0].split("\t")
    assert first[2:] == ["∅ → queued", "create", "new", "client:carol", "", ""]
    assert "publish" in moves.stdout
    assert "None" not in moves.stdout
    streamed = cli("events", job_id, env=client_env)
    assert streamed.returncode == 0, streamed.stderr
    assert "→ succeeded" in streamed.stdout

    too_late = cli("cancel", job_id, env=client_env)
    assert too_late.returncode == 1
    assert "succeeded" in too_late.stderr

    urgent = cli(
        "submit", "--kind", "atlas.noop", "--priority", "8", "--tag", "team=press", "--json",
        env=client_env,
    )  # fmt: skip
    assert urgent.returncode == 0, urgent.stderr
    assert (json.loads(urgent.stdout)["priority"], json.loads(urgent.stdout)["tags"]) == (
        8,
        ["team=press"],
    )
    out_of_range = cli("submit", "--kind", "atlas.noop", "--priority", "10", env=client_env)
    assert out_of_range.returncode == 1
    assert "priority" in out_of_range.stderr

    second = cli("submit", "--kind", "atlas.noop", env=client_env).stdout.strip()
    canceled = cli("cancel", second, env=client_env)
    assert (canceled.returncode, canceled.stdout.strip()) == (0, "canceled")
    unknown = cli("status", str(uuid.uuid4()), env=client_env)
    assert unknown.returncode == 5
    assert "not found" in unknown.stderr

    revoked = cli("keys", "revoke", listed.stdout.split()[0], env=base)
    assert revoked.returncode == 0
    refused = cli("status", job_id, env=client_env)
    assert refused.returncode == 4
    assert refused.stderr.strip() == (
        "the API key was rejected (401); check --api-key or ATLAS_API_KEY"
    )


async def test_submit_from_file_sends_batches_and_prints_one_id_per_job(
    live_api: LiveApi, database_url: str, data_dir: Path, engine: AsyncEngine, tmp_path: Path
) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="dora", roles=[Role.CLIENT])
    env = {"DATABASE_URL": database_url, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    lines = [
        json.dumps({"kind": "atlas.bundle", "input": BUNDLE_INPUT, "idempotency_key": "f-1"}),
        "",
        json.dumps({"kind": "atlas.noop", "input": {"tag": "two"}}),
        json.dumps({"kind": "atlas.noop", "tags": ["batch=7"], "priority": 9, "delay_seconds": 60}),
    ]
    jobs_file = tmp_path / "jobs.jsonl"
    jobs_file.write_text("\n".join(lines) + "\n")
    sent = cli("submit", "--from-file", str(jobs_file), "--batch-size", "2", env=env)
    assert sent.returncode == 0, sent.stderr
    ids = sent.stdout.split()
    assert len(ids) == 3
    async with engine.connect() as conn:
        rows = await conn.execute(select(jobs.c.id, jobs.c.kind).order_by(jobs.c.seq))
        assert [(str(r.id), r.kind) for r in rows] == list(
            zip(ids, ["atlas.bundle", "atlas.noop", "atlas.noop"], strict=True)
        )
        last = (
            await conn.execute(
                select(jobs.c.tags, jobs.c.priority, jobs.c.run_at).order_by(jobs.c.seq.desc())
            )
        ).first()
        assert last is not None
        assert (last.tags, last.priority, last.run_at is not None) == (["batch=7"], 9, True)
    again = cli("submit", "--from-file", str(jobs_file), env=env)
    # The file's key gives the same job; lines without one are new jobs (fresh keys).
    assert again.stdout.split()[0] == ids[0]
    assert set(again.stdout.split()[1:]).isdisjoint(ids)

    mixed = cli("submit", "--from-file", str(jobs_file), "--priority", "9", env=env)
    assert mixed.returncode == 2  # a per-job option beside the file would be dropped
    assert "from the file" in mixed.stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "atlas.noop"}\n{"kind": \n[1]\n{"input": {}}\n')
    refused = cli("submit", "--from-file", str(bad), env=env)
    assert refused.returncode == 2
    assert f"{bad}:2: not valid JSON" in refused.stderr
    assert f"{bad}:3: not a JSON object" in refused.stderr
    assert f'{bad}:4: "kind"' in refused.stderr
    assert f"{bad}:1:" not in refused.stderr
    assert "Traceback" not in refused.stderr

    invalid = tmp_path / "invalid.jsonl"
    duplicate_pages = {**BUNDLE_INPUT, "pages": ["cover", "cover"]}
    invalid.write_text(
        json.dumps({"kind": "atlas.noop"})
        + "\n"
        + json.dumps({"kind": "atlas.bundle", "input": duplicate_pages})
        + "\n"
    )
    rejected = cli("submit", "--from-file", str(invalid), env=env)
    assert rejected.returncode == 1
    assert f"{invalid}:2: input.pages:" in rejected.stderr
    assert "Traceback" not in rejected.stderr
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 5  # all or nothing


async def test_result_download_refuses_a_file_that_does_not_match_its_sha256(
    live_api: LiveApi, engine: AsyncEngine, driver: Driver, tmp_path: Path
) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="fay", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    submitted = cli(
        "submit", "--kind", "atlas.bundle", "--input", json.dumps(BUNDLE_INPUT), env=env
    )
    job_id = submitted.stdout.strip()
    await driver.succeed(uuid.UUID(job_id), "fay", {"bundle.zip": b"the real bytes"})
    published = driver.store.published_path("fay", uuid.UUID(job_id), "bundle.zip")
    assert published is not None
    published.write_bytes(b"tampered bytes")  # the reference still names the real sha256
    out = tmp_path / "out"
    refused = cli("result", job_id, "-o", str(out), env=env)
    assert refused.returncode == 6
    assert "does not match" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert not (out / "bundle.zip").exists()
    assert list(out.iterdir()) == []  # no partial file left behind


async def test_keys_carry_a_holder_and_end_sessions_logs_out_everywhere(
    database_url: str, data_dir: Path, engine: AsyncEngine
) -> None:
    base = {"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)}
    created = cli(
        "keys", "create", "--owner", "dora", "--role", "reviewer", "--holder", "Dora R.", env=base
    )
    assert created.returncode == 0, created.stderr
    assert "held by 'Dora R.'" in created.stderr
    listed = cli("keys", "list", "--owner", "dora", env=base)
    assert "holder=Dora R." in listed.stdout
    blank = cli("keys", "create", "--owner", "dora", "--holder", "  ", env=base)
    assert blank.returncode == 2
    assert "holder must be" in blank.stderr
    async with engine.begin() as conn:
        principal = await authenticate(conn, created.stdout.strip())
        assert principal is not None
        await open_session(conn, principal.key_id, ttl_seconds=60)
    assert cli("keys", "end-sessions", env=base).returncode == 2  # says whose
    ended = cli("keys", "end-sessions", "--owner", "dora", env=base)
    assert (ended.returncode, ended.stdout.strip()) == (0, "ended 1 session(s)")


async def test_a_refusal_names_each_field_and_a_bad_job_id_is_named(
    live_api: LiveApi, engine: AsyncEngine
) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="gail", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    too_many = {**BUNDLE_INPUT, "pages": ["cover", "summary", "appendix"]}
    refused = cli("submit", "--kind", "atlas.bundle", "--input", json.dumps(too_many), env=env)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    title = "The input does not match the kind's schema"
    assert lines[0] == f"HTTP 422 {title}"  # the title once, not "title: title"
    assert refused.stderr.count(title) == 1
    assert "pages: List should have at most 2 items after validation, not 3" in lines[1:]

    for verb in ("status", "watch", "history", "cancel", "result", "events"):
        bad = cli(verb, "123", env=env)
        assert bad.returncode == 2, (verb, bad.stderr)
        assert bad.stderr.startswith("123 is not a job id"), (verb, bad.stderr)
        assert "does not match the API schema" not in bad.stderr


def test_the_root_leads_to_the_status_page_and_stays_out_of_the_api_document(
    live_api: LiveApi,
) -> None:
    root = httpx.get(f"{live_api.url}/", follow_redirects=False)
    assert root.status_code == 303
    assert root.headers["location"] == "/ui/jobs"
    page = httpx.get(f"{live_api.url}/", follow_redirects=True)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")  # the login form
    assert "/" not in httpx.get(f"{live_api.url}/openapi.json").json()["paths"]


@pytest.mark.parametrize("log_format", ["console", "json"])
def test_serve_names_the_status_page_and_how_to_make_a_first_key(
    log_format: str, database_url: str, data_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_LOG_FORMAT": log_format,
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "1",
    }
    log_path = tmp_path / "serve.log"
    with atlas_process(
        ["serve", "--port", str(port), "--workers", "0"],
        env=env,
        log_path=log_path,
        ready_url=f"{base}/readyz",
    ):
        said = log_path.read_text()
        status_page = httpx.get(f"{base}/ui/jobs", follow_redirects=True)
    assert status_page.status_code == 200  # the URL named is a page that is served
    first_key = "atlas-jobs keys create --owner NAME --role client"
    if log_format == "console":
        assert f"status page {base}/ui/jobs" in said
        assert first_key in said
        return
    [started] = [json.loads(line) for line in said.splitlines() if '"serve.started"' in line]
    assert started["status_page"] == f"{base}/ui/jobs"
    assert started["first_key"] == first_key
    assert started["api"] == f"{base}/v1"  # the fields it had are kept
    assert {"readyz", "metrics", "workers", "concurrency", "database", "public_url"} <= set(started)
