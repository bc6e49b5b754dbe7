"""The status page a person meets, in a real browser (Debian's chromium) against a real
API process and worker: the submit form (a refused input shows the API's problem, field
by field; a created job opens its page), the job's input on its page, short ids with a
copy button, relative and elapsed times with the exact time on hover, a link to the API
docs (``/docs`` and ``/redoc`` load nothing from outside the app), a favicon (no 404 on
any page), and no sideways scrolling at a phone's 390 px. Screenshots at desktop and
phone widths are written to ``.atlas/ui-screenshots/`` (printed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.ui.browser import LAUNCH_ARGS
from tests.ui.test_status_page import (  # noqa: F401 - fixtures
    BUNDLE,
    WAIT_MS,
    Service,
    chromium,
    screenshots,
    service,
    wait_for,
)

pytest.importorskip("playwright", reason="playwright is part of the dev extra")
from playwright.async_api import Page, async_playwright, expect

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
_UTC = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC")


async def page_width(page: Page) -> int:
    width: int = await page.evaluate(
        "() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
    )
    return width


async def both_widths(page: Page, folder: Path, name: str) -> None:
    """A screenshot at desktop and at phone width; at 390 px the page does not scroll
    sideways (wide tables scroll inside their own box)."""
    await page.set_viewport_size(DESKTOP)
    await page.screenshot(path=folder / f"{name}-desktop.png", full_page=True)
    await page.set_viewport_size(PHONE)
    await page.screenshot(path=folder / f"{name}-390.png", full_page=True)
    assert await page_width(page) <= PHONE["width"], name
    await page.set_viewport_size(DESKTOP)


@pytest.mark.timeout(900)
async def test_submit_a_job_and_read_its_page_at_desktop_and_phone_widths(
    service: Service,  # noqa: F811
    chromium: Path,  # noqa: F811
    screenshots: Path,  # noqa: F811
) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(chromium), args=LAUNCH_ARGS, headless=True
        )
        try:
            context = await browser.new_context(viewport=DESKTOP)
            await context.grant_permissions(
                ["clipboard-read", "clipboard-write"], origin=service.url
            )
            page = await context.new_page()
            missing: list[str] = []
            outside: list[str] = []
            page.on(
                "response",
                lambda r: missing.append(r.url) if r.status == 404 else None,
            )
            page.on(
                "request",
                lambda r: (
                    outside.append(r.url)
                    if not r.url.startswith((service.url, "data:", "blob:"))
                    else None
                ),
            )
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))

            await page.goto(f"{service.url}/ui/login?next=%2Fui%2Fsubmit")
            await page.get_by_label("API key").fill(service.alice)
            await page.get_by_role("button", name="Log in").click()
            await expect(page).to_have_url(f"{service.url}/ui/submit")

            # The form for atlas.bundle: the schema's fields, a starting document.
            await page.get_by_test_id("pick-kind").select_option("atlas.bundle")
            await page.get_by_role("button", name="Show its form").click()
            fields = page.get_by_test_id("fields")
            await expect(fields).to_contain_text("preset")
            await expect(fields).to_contain_text("required")
            started = json.loads(await page.get_by_test_id("input-json").input_value())
            assert set(started) >= {"preset", "pages"}
            await both_widths(page, screenshots, "submit")

            # A refused input: the API's problem, one line per field.
            too_many = {**BUNDLE, "preset": "coast", "pages": ["cover", "summary", "cover"]}
            await page.get_by_test_id("input-json").fill(json.dumps(too_many))
            await page.get_by_test_id("submit").click()
            problem = page.get_by_test_id("problem")
            await expect(problem).to_contain_text("The input does not match the kind's schema")
            await expect(problem).to_contain_text("input.pages: List should have at most 2 items")
            await both_widths(page, screenshots, "submit-refused")
            await page.get_by_test_id("input-json").fill("{not json")
            await page.get_by_test_id("submit").click()
            await expect(page.get_by_test_id("problem")).to_contain_text("The input is not JSON")

            # A good one: the job's page, with the input as sent.
            good = {**BUNDLE, "preset": "coast"}
            await page.get_by_test_id("input-json").fill(json.dumps(good))
            await page.get_by_test_id("submit").click()
            await expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f-]{36}$"))
            job_id = page.url.rsplit("/", 1)[1]
            shown_input = await page.get_by_test_id("input").locator("pre").text_content()
            assert json.loads(shown_input or "") == good

            # The short id and its copy button (the whole id on the clipboard).
            heading = page.get_by_role("heading", level=1)
            await expect(heading).to_contain_text(job_id[:8])
            assert job_id not in (await heading.text_content() or "")
            copy = heading.get_by_role("button", name=f"Copy the id {job_id}")
            await copy.click()
            await expect(copy).to_have_text("Copied")
            assert await page.evaluate("() => navigator.clipboard.readText()") == job_id

            # Relative times, the exact one on hover.
            created = page.get_by_test_id("created").locator("time")
            assert re.fullmatch(r"just now|\d+ s ago", (await created.text_content()) or "")
            assert _UTC.fullmatch(await created.get_attribute("title") or "")

            # Finished: how long it ran, and the history table held in its box at 390 px.
            async with service.client(service.alice) as alice:
                await wait_for(alice, job_id, lambda s: s["state"] == "succeeded")
            await page.reload()
            await expect(page.get_by_test_id("elapsed")).to_have_text(re.compile(r"ran \d+ s"))
            await expect(page.get_by_test_id("label")).to_have_text("Ready — download")
            await both_widths(page, screenshots, "job-succeeded")

            # The list: short ids linking to the job, copy buttons.
            await page.goto(f"{service.url}/ui/jobs")
            link = page.get_by_role("link", name=f"Job {job_id}")
            await expect(link).to_have_text(job_id[:8])
            await both_widths(page, screenshots, "jobs")
            await page.goto(f"{service.url}/ui/kinds")
            await both_widths(page, screenshots, "kinds")

            # The API docs, linked from every page, load nothing from outside the app.
            await page.get_by_test_id("api-docs").first.click()
            await expect(page).to_have_url(f"{service.url}/docs")
            await expect(page.locator(".swagger-ui .info .title")).to_contain_text(
                "Atlas", timeout=WAIT_MS
            )
            await page.goto(f"{service.url}/redoc", wait_until="networkidle")
            await expect(page.locator("h1").first).to_contain_text("Atlas", timeout=WAIT_MS)
            assert outside == [], outside
            assert missing == [], missing  # the favicon included
            assert problems == []
        finally:
            await browser.close()


async def test_the_favicon_is_served(service: Service) -> None:  # noqa: F811
    async with service.client(service.alice) as http:
        icon = await http.get("/ui/static/favicon.svg")
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
