"""What the client verbs print, against a live API: a retry's cause in ``events`` and
``history`` (no ``None``), a result without files (label, ``result`` and its exit
codes), a failed job's attempt line, empty lists that say so, aligned tables."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.cli.client import event_lines
from atlas_jobs._app.cli.tables import print_table
from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._app.transitions import Applied, Transitions, error_doc
from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, WORKER, Driver
from tests.api.test_cli import cli


async def _submit(live_api: LiveApi, key: str) -> uuid.UUID:
    async with httpx.AsyncClient(base_url=live_api.url) as http:
        answer = await http.post(
            "/v1/jobs",
            json={"kind": "atlas.bundle", "input": BUNDLE_INPUT},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 202, answer.text
    return uuid.UUID(answer.json()["id"])


@pytest.fixture
async def erin(engine: AsyncEngine, live_api: LiveApi) -> dict[str, str]:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="erin", roles=[Role.CLIENT])
    return {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}


async def test_a_retried_job_shows_the_retry_and_its_cause(
    live_api: LiveApi,
    erin: dict[str, str],
    driver: Driver,
    transitions: Transitions,
    engine: AsyncEngine,
) -> None:
    job_id = await _submit(live_api, erin["ATLAS_API_KEY"])
    attempt = await driver.claim(job_id)
    async with engine.begin() as conn:
        moved = await transitions.retry_later(
            conn,
            job_id,
            attempt,
            error=error_doc("tiles_timeout", "the tile service timed out", retryable=True),
            delay_seconds=0,
            actor=WORKER,
        )
    assert moved.ok
    await driver.succeed(job_id, "erin", {"bundle.zip": b"zip"})

    streamed = cli("events", str(job_id), env=erin)
    assert streamed.returncode == 0, streamed.stderr
    retry = [line for line in streamed.stdout.splitlines() if "running → queued" in line]
    assert len(retry) == 1, streamed.stdout
    assert "retry" in retry[0]
    assert "cause: tiles_timeout: the tile service timed out" in retry[0]

    moves = cli("history", str(job_id), env=erin)
    assert moves.returncode == 0, moves.stderr
    assert "None" not in moves.stdout
    rows = [line.split("\t") for line in moves.stdout.splitlines()]
    assert all(len(row) == 8 for row in rows), moves.stdout
    (retried,) = [row for row in rows if row[2] == "running → queued"]
    assert retried[6] == "1"
    assert retried[7] == "error: the tile service timed out"


def test_progress_lines_only_when_the_label_changes() -> None:
    def progress(done: int, at: str) -> tuple[str, str, dict[str, Any]]:
        stages = [{"name": "validate", "unit": "checks", "done": done, "total": 4}]
        data = {
            "state": "running",
            "updated_at": at,
            "progress": {"stage": "validate", "plan_revision": 1, "stages": stages},
        }
        return ("progress", "", data)

    events: Iterator[tuple[str, str, dict[str, Any]]] = iter(
        [progress(4, "t1"), progress(4, "t2"), progress(4, "t3")]
    )
    assert list(event_lines(events)) == ["    ·  t1  Validating: 4 of 4 checks"]


async def test_a_result_without_files_reads_as_finished_and_has_nothing_to_download(
    live_api: LiveApi,
    erin: dict[str, str],
    driver: Driver,
    transitions: Transitions,
    engine: AsyncEngine,
    tmp_path: Path,
) -> None:
    job_id = await _submit(live_api, erin["ATLAS_API_KEY"])
    attempt = await driver.claim(job_id)
    async with engine.begin() as conn:
        staged = await transitions.stage_output(
            conn, job_id, attempt, DeliveryState.STAGED_PRIVATE, actor=WORKER
        )
        assert staged.ok
    async with engine.begin() as conn:
        assert await transitions.lock_for_publication(conn, job_id, attempt)
        published = await transitions.publish(
            conn, job_id, attempt, result_ref={"files": []}, ttl_seconds=60, actor=WORKER
        )
    assert isinstance(published, Applied), published

    shown = cli("status", str(job_id), env=erin)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "Finished (no files)"
    assert "Ready — download" not in shown.stdout
    assert "result    the job finished without files" in shown.stdout

    listed = cli("result", str(job_id), env=erin)
    assert (listed.returncode, listed.stdout) == (0, "")
    assert listed.stderr == "nothing to download: the job finished without files\n"
    out = tmp_path / "out"
    fetched = cli("result", str(job_id), "-o", str(out), env=erin)
    assert fetched.returncode == 7
    assert "nothing to download" in fetched.stderr
    assert not out.exists()

    watched = cli("watch", str(job_id), "--wait", "1", env=erin)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.strip().splitlines()[-1] == "Finished (no files)"

    none = cli("webhooks", "deliveries", str(job_id), env=erin)
    assert (none.returncode, none.stdout) == (0, "")
    assert "no notifications for this job" in none.stderr


async def test_a_failed_job_says_no_retry_follows(
    live_api: LiveApi, erin: dict[str, str], driver: Driver
) -> None:
    job_id = await _submit(live_api, erin["ATLAS_API_KEY"])
    await driver.fail(job_id)
    shown = cli("status", str(job_id), env=erin)
    assert shown.returncode == 0, shown.stderr
    (attempt,) = [line for line in shown.stdout.splitlines() if line.startswith("state")]
    assert attempt.endswith("; no retry follows: the error is permanent"), attempt
    assert "attempt 1 of " in attempt


def test_tables_align_on_a_terminal_and_say_when_empty(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_table(("ID", "NAME"), [["a1", None], ["b", "nightly"]], empty="none", terminal=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "NAME"]
    assert lines[2].index("nightly") == lines[0].index("NAME")  # aligned under its header
    assert "None" not in "\n".join(lines)
    print_table(("ID",), [], empty="no things")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "no things\n")
