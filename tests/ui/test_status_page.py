"""The status page in a real browser (Playwright driving Debian's chromium, headless)
against a real API process and a real worker process on this test's database.

Steps: log in through the form; cancel a running job from its page (the button, then
``cancel_requested``, then ``canceled``); open a running ``coast`` job and see "Building
tiles: 2 of 6; plan expanded" appear without a reload, then the download link; open a
failed ``reef`` job: no link; open another owner's job id: "not found"; log out, log in
as an operator (back to the page asked for): bob's job and the queue view. A screenshot
of each page is written to ``.atlas/ui-screenshots/`` (printed).

Workers run ``atlas.bundle`` at the seed timeline's own pace (time scale 1.0): the
expanded plan shows for 1.5 s, a coast job takes 14 s. A MutationObserver installed in
the page records every label and state the page showed, so a short-lived one is still
seen, and a window marker set before the job changed proves the page never reloaded.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.presentation import Observation, present
from tests.acceptance.conftest import SEED_SETTINGS
from tests.support import REPO, atlas_process, free_port
from tests.ui.browser import LAUNCH_ARGS, ensure_chromium
from tests.workers.procs import Fleet

pytest.importorskip("playwright", reason="playwright is part of the dev extra")
from playwright.async_api import Page, async_playwright, expect

SCREENSHOTS = REPO / ".atlas" / "ui-screenshots"
BUNDLE = {"pages": ["cover", "summary"], "format": "text-bundle-v1"}
EXPANDED = "Building tiles: 2 of 6; plan expanded"
WAIT_MS = 40_000

# Records, in the page, every label and state the job panel showed.
RECORDER = """
() => {
  window.__shown = {labels: [], states: []};
  const note = () => {
    const label = document.querySelector('[data-testid="label"]');
    const state = document.querySelector('[data-testid="state"]');
    const seen = window.__shown;
    if (label && seen.labels[seen.labels.length - 1] !== label.textContent) {
      seen.labels.push(label.textContent);
    }
    if (state && seen.states[seen.states.length - 1] !== state.textContent) {
      seen.states.push(state.textContent);
    }
  };
  note();
  new MutationObserver(note).observe(
    document.getElementById('job-panel'), {childList: true, subtree: true, characterData: true}
  );
}
"""


@dataclass
class Service:
    url: str
    alice: str
    bob: str
    operator: str
    fleet: Fleet

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
        alice = await create_key(conn, owner="alice", roles=[Role.CLIENT])
        bob = await create_key(conn, owner="bob", roles=[Role.CLIENT])
        operator = await create_key(conn, owner="ops", roles=[Role.OPERATOR, Role.CLIENT])
    settings = replace(SEED_SETTINGS, bundle_time_scale=1.0)
    fleet = Fleet(database_url, data_dir, settings, {"ATLAS_SIGNING_SECRET": "ui-test-secret"})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        with atlas_process(
            ["api", "--port", str(port)],
            env=fleet.env(),
            log_path=tmp_path / "api.log",
            ready_url=f"{url}/readyz",
        ):
            fleet.start("ui-worker", concurrency=3)
            yield Service(url, alice, bob, operator, fleet)
    finally:
        fleet.close()


@pytest.fixture
def screenshots(capsys: pytest.CaptureFixture[str]) -> Iterator[Path]:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    yield SCREENSHOTS
    with capsys.disabled():  # printed whether or not output is captured
        print(f"\nstatus page screenshots (for review): {SCREENSHOTS}")


async def submit(http: httpx.AsyncClient, kind: str, data: dict[str, Any]) -> str:
    answer = await http.post("/v1/jobs", json={"kind": kind, "input": data})
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["id"]
    return job_id


async def wait_for(http: httpx.AsyncClient, job_id: str, until: Any) -> dict[str, Any]:
    """Long-poll the API until ``until(status)``."""
    deadline = time.monotonic() + WAIT_MS / 1000
    etag = None
    while time.monotonic() < deadline:
        headers = {"Prefer": "wait=5", **({"If-None-Match": etag} if etag else {})}
        answer = await http.get(f"/v1/jobs/{job_id}", headers=headers)
        if answer.status_code == 304:
            continue
        etag = answer.headers["ETag"]
        status: dict[str, Any] = answer.json()
        if until(status):
            return status
    raise AssertionError(f"job {job_id} never reached the condition")


async def shown(page: Page) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = await page.evaluate("window.__shown")
    return seen


@pytest.mark.timeout(900)  # a first run may install chromium (apt) during set-up
async def test_the_status_page_live_in_a_browser(
    service: Service, chromium: Path, screenshots: Path
) -> None:
    async with service.client(service.alice) as alice, service.client(service.bob) as bob:
        bobs = await submit(bob, "atlas.noop", {})
        reef = await submit(alice, "atlas.bundle", {**BUNDLE, "preset": "reef"})
        doomed = await submit(alice, "atlas.bundle", {**BUNDLE, "preset": "coast"})

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=str(chromium), args=LAUNCH_ARGS, headless=True
            )
            try:
                page = await browser.new_page(viewport={"width": 1200, "height": 1000})
                dialogs: list[str] = []

                async def accept(dialog: Any) -> None:
                    dialogs.append(dialog.message)
                    await dialog.accept()

                page.on("dialog", accept)
                # Script errors and Content-Security-Policy violations, if any.
                problems: list[str] = []
                page.on("pageerror", lambda error: problems.append(str(error)))
                page.on(
                    "console",
                    lambda message: (
                        problems.append(message.text)
                        if "Content Security Policy" in message.text
                        else None
                    ),
                )

                # Log in through the form.
                await page.goto(f"{service.url}/ui/jobs")
                await expect(page).to_have_url(f"{service.url}/ui/login?next=%2Fui%2Fjobs")
                await page.get_by_label("API key").fill(service.alice)
                await page.screenshot(path=screenshots / "1-login.png")
                await page.get_by_role("button", name="Log in").click()
                await expect(page).to_have_url(f"{service.url}/ui/jobs")
                await expect(page.get_by_role("link", name=reef)).to_be_visible()
                assert await page.get_by_role("link", name=bobs).count() == 0
                await page.screenshot(path=screenshots / "2-jobs.png", full_page=True)

                # Cancel a running job from its page.
                await wait_for(alice, doomed, lambda s: s["state"] == "running")
                await page.goto(f"{service.url}/ui/jobs/{doomed}")
                await page.evaluate(RECORDER)
                await page.get_by_test_id("cancel").click()
                await expect(page.get_by_test_id("state")).to_have_text("canceled", timeout=WAIT_MS)
                assert dialogs == [f"Cancel job {doomed}?"]
                states = (await shown(page))["states"]
                assert states[0] == "running"
                assert states[-2:] == ["cancel_requested", "canceled"], states
                assert await page.get_by_test_id("cancel").count() == 0
                history = page.get_by_test_id("history")
                await expect(history).to_contain_text("request_cancel")
                await expect(history).to_contain_text("client:alice")
                await page.screenshot(path=screenshots / "3-canceled.png", full_page=True)

                # A running coast job, live: the expanded plan, then the download link.
                coast = await submit(alice, "atlas.bundle", {**BUNDLE, "preset": "coast"})
                await page.goto(f"{service.url}/ui/jobs/{coast}")
                marker = secrets.token_hex(8)
                await page.evaluate("(marker) => { window.__marker = marker; }", marker)
                await page.evaluate(RECORDER)
                await expect(page.get_by_test_id("live-state")).to_have_text("live")
                await page.wait_for_function(  # a function: the page's CSP forbids eval
                    "(label) => window.__shown.labels.includes(label)",
                    arg=EXPANDED,
                    timeout=WAIT_MS,
                )
                await page.screenshot(path=screenshots / "4-coast-building.png", full_page=True)
                download = page.get_by_test_id("download").filter(has_text="bundle.zip")
                await expect(download).to_be_visible(timeout=WAIT_MS)
                assert await page.evaluate("window.__marker") == marker  # never reloaded
                labels = (await shown(page))["labels"]
                assert labels.index(EXPANDED) < labels.index("Ready — download"), labels
                final = (await alice.get(f"/v1/jobs/{coast}")).json()
                assert present(final, Observation.FRESH).label == "Ready — download"
                await expect(page.get_by_test_id("label")).to_have_text("Ready — download")
                await expect(page.get_by_test_id("live-state")).to_have_text("finished")
                href = await download.get_attribute("href")
                assert href is not None
                assert href.startswith("/v1/downloads/")
                fetched = await page.request.get(f"{service.url}{href}")
                assert fetched.status == 200
                await page.screenshot(path=screenshots / "5-coast-ready.png", full_page=True)

                # A failed reef job: no link.
                await wait_for(alice, reef, lambda s: s["state"] == "failed")
                await page.goto(f"{service.url}/ui/jobs/{reef}")
                await expect(page.get_by_test_id("state")).to_have_text("failed")
                await expect(page.get_by_test_id("label")).to_contain_text("Failed: ")
                assert await page.get_by_test_id("download").count() == 0
                assert await page.get_by_test_id("cancel").count() == 0
                await page.screenshot(path=screenshots / "6-reef-failed.png", full_page=True)

                # Another owner's job id: not found.
                answer = await page.goto(f"{service.url}/ui/jobs/{bobs}")
                assert answer is not None
                assert answer.status == 404
                await expect(page.get_by_test_id("not-found")).to_have_text("Not found")
                await page.screenshot(path=screenshots / "7-not-found.png", full_page=True)

                # Log out; an operator sees bob's job and the queue view.
                await page.goto(f"{service.url}/ui/jobs")
                await page.get_by_role("button", name="Log out").click()
                await expect(page).to_have_url(f"{service.url}/ui/login")
                await page.goto(f"{service.url}/ui/jobs/{bobs}")
                await page.get_by_label("API key").fill(service.operator)
                await page.get_by_role("button", name="Log in").click()
                await expect(page).to_have_url(f"{service.url}/ui/jobs/{bobs}")
                await expect(page.get_by_test_id("state")).to_have_text("succeeded")
                await page.get_by_role("link", name="Queue").click()
                await expect(page.get_by_test_id("queue")).to_be_visible()
                await page.screenshot(path=screenshots / "8-queue.png", full_page=True)
                assert problems == []
            finally:
                await browser.close()
