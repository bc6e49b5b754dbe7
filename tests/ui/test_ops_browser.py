"""The operators' page in a real browser (Playwright driving Debian's chromium, headless)
against a real API process and a real worker process on this test's database.

Steps: an operator logs in and opens the page; the charts count jobs finished moments
ago without a reload (the workers' rollup, then the page's event stream); the operator
pauses ``atlas.noop`` from the form; a new job stays queued and its page says who paused
the kind and why; the queue-age chart and the table show it waiting; in the jobs of every
owner, one of two more held jobs is canceled in bulk (the dry-run count, the
confirmation, the operation's progress to its end); Resume (confirmed) lets the others
run. Screenshots go to ``.atlas/ui-screenshots/ops-*.png`` (printed), beside the status
page's.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from tests.acceptance.conftest import SEED_SETTINGS
from tests.support import REPO, atlas_process, free_port
from tests.ui.browser import LAUNCH_ARGS, ensure_chromium
from tests.workers.procs import Fleet

pytest.importorskip("playwright", reason="playwright is part of the dev extra")
from playwright.async_api import async_playwright, expect

SCREENSHOTS = REPO / ".atlas" / "ui-screenshots"
"""Where every browser test keeps its screenshots after the run (docs/status-page.md,
"Browser tests and their screenshots"): the checkout's, never a temporary folder."""
WAIT_MS = 40_000
NOTE = "mail relay down; resume when it answers"
HELD_LINE = re.compile(r"^Oldest queued job, per kind: now atlas\.noop \d+ s$")


@dataclass
class Service:
    url: str
    client_key: str
    operator: str

    def client(self, key: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )


@pytest.fixture
def chromium() -> Path:
    return ensure_chromium()


@pytest.fixture
async def service(
    database_url: str, data_dir: Path, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[Service]:
    async with engine.begin() as conn:
        client_key = await create_key(conn, owner="carol", roles=[Role.CLIENT])
        operator = await create_key(conn, owner="ops", roles=[Role.OPERATOR, Role.CLIENT])
    fleet = Fleet(
        database_url,
        data_dir,
        SEED_SETTINGS,
        {"ATLAS_SIGNING_SECRET": "ui-test-secret", "ATLAS_ACTIVITY_INTERVAL_SECONDS": "1"},
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with atlas_process(
            ["api", "--port", str(port)],
            env=fleet.env(),
            log_path=tmp_path / "api.log",
            ready_url=f"{url}/readyz",
        ):
            fleet.start("ops-ui-worker", concurrency=2)
            yield Service(url, client_key, operator)
    finally:
        fleet.close()


@pytest.fixture
def screenshots(capsys: pytest.CaptureFixture[str]) -> Iterator[Path]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    yield SCREENSHOTS
    with capsys.disabled():
        print(f"\noperators' page screenshots (for review): {SCREENSHOTS}/ops-*.png")


async def submit(http: httpx.AsyncClient) -> str:
    answer = await http.post("/v1/jobs", json={"kind": "atlas.noop", "input": {}})
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["id"]
    return job_id


async def state_of(http: httpx.AsyncClient, job_id: str, wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        status: dict[str, Any] = (await http.get(f"/v1/jobs/{job_id}")).json()
        if status["state"] == wanted:
            return status
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.2)


@pytest.mark.timeout(900)  # a first run may install chromium (apt) during set-up
async def test_the_operators_page_live_in_a_browser(
    service: Service, chromium: Path, screenshots: Path
) -> None:
    async with service.client(service.client_key) as carol:
        done = [await submit(carol) for _ in range(3)]
        for job_id in done:
            await state_of(carol, job_id, "succeeded")

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=str(chromium), args=LAUNCH_ARGS, headless=True
            )
            try:
                context = await browser.new_context(viewport={"width": 1280, "height": 1200})
                page = await context.new_page()
                dialogs: list[str] = []

                async def accept(dialog: Any) -> None:
                    dialogs.append(dialog.message)
                    await dialog.accept()

                page.on("dialog", accept)
                problems: list[str] = []
                step = ["login"]
                page.on("pageerror", lambda error: problems.append(str(error)))
                page.on(
                    "console",
                    lambda message: (
                        problems.append(f"{step[0]}: {message.text[:60]}")
                        if "Content Security Policy" in message.text
                        else None
                    ),
                )

                await page.goto(f"{service.url}/ui/ops")
                await page.get_by_label("API key").fill(service.operator)
                await page.get_by_role("button", name="Log in").click()
                await expect(page).to_have_url(f"{service.url}/ui/ops")
                marker = secrets.token_hex(8)
                await page.evaluate("(marker) => { window.__marker = marker; }", marker)
                await expect(page.get_by_test_id("live-state")).to_have_text("live")
                finished = page.get_by_test_id("chart-finished")
                await expect(finished).to_have_attribute(
                    "aria-label",
                    "Jobs finished, by outcome: succeeded 3, failed 0, canceled 0 (total 3)",
                    timeout=WAIT_MS,
                )
                step[0] = "charts"
                await page.screenshot(path=screenshots / "ops-1-charts.png", full_page=True)

                step[0] = "pause"
                # Pause the kind from the form; a new job is held, and says why.
                pause_form = page.get_by_role("form", name="Pause a kind")
                await pause_form.get_by_label("Kind").fill("atlas.noop")
                await pause_form.get_by_label("Note").fill(NOTE)
                await pause_form.get_by_role("button", name="Pause").click()
                await expect(page.get_by_test_id("pause-notice")).to_have_text("Paused atlas.noop.")
                row = page.get_by_test_id("pause-row")
                await expect(row).to_contain_text("operator:ops")
                await expect(row).to_contain_text(NOTE)
                held = await submit(carol)
                queue_now = page.get_by_test_id("queue-now")
                await expect(queue_now).to_contain_text("atlas.noop", timeout=WAIT_MS)
                await expect(page.get_by_test_id("chart-queue-age")).to_have_attribute(
                    "aria-label", HELD_LINE, timeout=WAIT_MS
                )
                assert await page.evaluate("window.__marker") == marker  # never reloaded
                assert (await carol.get(f"/v1/jobs/{held}")).json()["state"] == "queued"
                await page.screenshot(path=screenshots / "ops-2-paused.png", full_page=True)

                # Two more held jobs: cancel one of them in bulk, previewed then confirmed.
                extra = [await submit(carol) for _ in range(2)]
                filters = page.get_by_role("form", name="Job filters")
                await filters.get_by_label("Kind").fill("atlas.noop")
                await filters.get_by_role("checkbox", name="queued", exact=True).check()
                await filters.get_by_role("button", name="Search").click()
                rows = page.get_by_test_id("ops-job-row")
                await expect(rows).to_have_count(3)
                await (
                    page.get_by_role("form", name="Bulk action")
                    .get_by_label("Action")
                    .select_option("cancel")
                )
                await page.get_by_role("checkbox", name=f"Pick {extra[0]}").check()
                await page.get_by_role("button", name="Preview").click()
                panel = page.locator("#bulk-panel")
                await expect(panel).not_to_be_empty()
                assert await panel.get_by_test_id("bulk-refused").count() == 0, (
                    await panel.text_content()
                )
                await expect(page.get_by_test_id("bulk-matched")).to_have_text("1")
                await page.screenshot(path=screenshots / "ops-3-bulk-preview.png", full_page=True)
                await page.get_by_test_id("bulk-confirm").click()
                await expect(page.get_by_test_id("bulk-state")).to_have_text(
                    "succeeded", timeout=WAIT_MS
                )
                await expect(page.get_by_test_id("bulk-counts")).to_contain_text("done 1")
                assert dialogs == ["Cancel 1 job(s)?"]
                await state_of(carol, extra[0], "canceled")
                await page.screenshot(path=screenshots / "ops-4-bulk-done.png", full_page=True)

                step[0] = "job page"
                job_page = await context.new_page()
                await job_page.goto(f"{service.url}/ui/jobs/{held}")
                label = job_page.get_by_test_id("label")
                await expect(label).to_contain_text("Queued — paused by operator:ops at ")
                await expect(label).to_contain_text(f"UTC: {NOTE}")
                await job_page.screenshot(path=screenshots / "ops-5-held-job.png", full_page=True)

                step[0] = "resume"
                await page.get_by_test_id("resume-atlas.noop").click()
                await expect(page.get_by_test_id("pause-notice")).to_have_text(
                    "Resumed atlas.noop."
                )
                assert dialogs[-1] == "Resume atlas.noop? Its queued jobs start at once."
                await state_of(carol, held, "succeeded")
                await state_of(carol, extra[1], "succeeded")
                await expect(job_page.get_by_test_id("state")).to_have_text(
                    "succeeded", timeout=WAIT_MS
                )
                await page.screenshot(path=screenshots / "ops-6-resumed.png", full_page=True)
                assert problems == [], problems
            finally:
                await browser.close()
