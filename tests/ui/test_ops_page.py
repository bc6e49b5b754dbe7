"""The operators' page over HTTP (httpx against the app, a real PostgreSQL): operators
only (pages, fragments, the stream and the forms), the charts drawn from the rollup, and
pausing and resuming a kind from the page with the page's CSRF and origin checks."""

from __future__ import annotations

import html
import re
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import activity
from atlas_jobs._app.lifecycle import JobState
from tests.api.support import Keys
from tests.factory import JobFactory
from tests.ui.conftest import BASE, SAME_ORIGIN, log_in

FORM = {**SAME_ORIGIN, "Content-Type": "application/x-www-form-urlencoded"}


def browser(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)


async def test_only_operators_reach_the_page_its_fragments_and_its_forms(
    app: FastAPI, keys: Keys
) -> None:
    async with browser(app) as http:
        csrf = await log_in(http, keys.alice)
        for path in ("/ui/ops", "/ui/ops/charts", "/ui/ops/pauses", "/ui/ops/live"):
            assert (await http.get(path)).status_code == 403, path
        refused = await http.post(
            "/ui/ops/pauses",
            data={"csrf_token": csrf, "kind": "atlas.bundle"},
            headers=SAME_ORIGIN,
        )
        assert refused.status_code == 403
        assert "Operations" not in (await http.get("/ui/jobs")).text


async def test_the_charts_show_the_rollup_and_a_bad_window_is_refused(
    app: FastAPI, keys: Keys, engine: AsyncEngine, jobs: JobFactory
) -> None:
    for state in (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED):
        await jobs.make(state)
    async with engine.begin() as conn:
        assert await activity.roll_up(conn, Clock())
    async with browser(app) as http:
        await log_in(http, keys.operator)
        page = await http.get("/ui/ops")
        assert page.status_code == 200, page.text
        assert 'href="/ui/ops">Operations</a>' in page.text
        created = re.search(r'data-testid="chart-created"[^>]*aria-label="([^"]+)"', page.text)
        finished = re.search(r'data-testid="chart-finished"[^>]*aria-label="([^"]+)"', page.text)
        assert created is not None
        assert finished is not None
        assert created.group(1) == "Jobs created: created 4 (total 4)"
        assert finished.group(1) == (
            "Jobs finished, by outcome: succeeded 2, failed 1, canceled 0 (total 3)"
        )
        day = await http.get("/ui/ops/charts", params={"window": "day"})
        assert day.status_code == 200
        assert "Activity, last day" in day.text
        assert (await http.get("/ui/ops/charts", params={"window": "year"})).status_code == 422


async def test_an_operator_pauses_and_resumes_a_kind_from_the_page(
    app: FastAPI, keys: Keys
) -> None:
    async with browser(app) as http:
        csrf = await log_in(http, keys.operator)
        form = {"csrf_token": csrf, "kind": "atlas.bundle", "version": "", "note": "s3 <down>"}
        no_token = await http.post(
            "/ui/ops/pauses", data={**form, "csrf_token": "x"}, headers=SAME_ORIGIN
        )
        assert no_token.status_code == 403
        other_site = await http.post(
            "/ui/ops/pauses", data=form, headers={"Origin": "https://evil.example"}
        )
        assert other_site.status_code == 403
        assert (await http.get("/v1/pauses", headers=keys.op)).json()["items"] == []

        paused = await http.post("/ui/ops/pauses", data=form, headers=SAME_ORIGIN)
        assert paused.status_code == 200
        assert "Paused atlas.bundle." in paused.text
        assert "s3 &lt;down&gt;" in paused.text  # a note is data, never markup
        assert "operator:ops" in paused.text
        listed = (await http.get("/v1/pauses", headers=keys.op)).json()["items"]
        assert [(p["kind"], p["version"], p["note"]) for p in listed] == [
            ("atlas.bundle", None, "s3 <down>")
        ]

        typo = await http.post(
            "/ui/ops/pauses", data={**form, "kind": "atlas.bundel"}, headers=SAME_ORIGIN
        )
        assert "Unknown kind &#39;atlas.bundel&#39;; known kinds: atlas.bundle" in typo.text
        bad_version = await http.post(
            "/ui/ops/pauses", data={**form, "version": "two"}, headers=SAME_ORIGIN
        )
        assert "is not a version number" in bad_version.text

        resumed = await http.post(
            "/ui/ops/pauses/resume",
            data={"csrf_token": csrf, "kind": "atlas.bundle", "version": ""},
            headers=SAME_ORIGIN,
        )
        assert "Resumed atlas.bundle." in resumed.text
        assert "No kind is paused." in resumed.text
        assert (await http.get("/v1/pauses", headers=keys.op)).json()["items"] == []


async def test_jobs_of_every_owner_and_a_bulk_action_previewed_then_confirmed(
    app: FastAPI, keys: Keys, engine: AsyncEngine, jobs: JobFactory
) -> None:
    alices = await jobs.make(JobState.UNRESOLVED, owner="alice")
    bobs = await jobs.make(JobState.UNRESOLVED, owner="bob")
    await jobs.make(JobState.SUCCEEDED, owner="bob")
    async with browser(app) as http:
        csrf = await log_in(http, keys.operator)
        listed = await http.get("/ui/ops/jobs", params={"state": "unresolved"})
        assert listed.status_code == 200, listed.text
        assert listed.text.count('data-testid="ops-job-row"') == 2
        assert str(alices.id) in listed.text
        assert str(bobs.id) in listed.text
        refused = await http.get("/ui/ops/jobs", params={"created_after": "yesterday"})
        assert refused.status_code == 422
        assert "created_after" in refused.text

        form = {
            "csrf_token": csrf,
            "filter": "state=unresolved",
            "action": "resume",
            "selection": "checked",
            "note": "destination back",
        }
        none_checked = await http.post("/ui/ops/bulk/preview", data=form, headers=SAME_ORIGIN)
        assert none_checked.status_code == 422
        assert "Check at least one job" in none_checked.text

        checked = [*form.items(), ("job_id", str(alices.id)), ("job_id", str(bobs.id))]
        preview = await http.post("/ui/ops/bulk/preview", content=urlencode(checked), headers=FORM)
        assert preview.status_code == 200, preview.text
        assert 'data-testid="bulk-matched">2</span>' in preview.text
        assert 'hx-confirm="Resume 2 job(s)?"' in preview.text
        every = await http.post(
            "/ui/ops/bulk/preview", data={**form, "selection": "filter"}, headers=SAME_ORIGIN
        )
        assert 'data-testid="bulk-matched">2</span>' in every.text
        assert "by the filter" in every.text
        listed_ops = (await http.get("/v1/bulk-operations", headers=keys.op)).json()
        assert listed_ops["items"] == []  # a preview creates nothing

        made = await http.post("/ui/ops/bulk", content=urlencode(checked), headers=FORM)
        assert made.status_code == 200, made.text
        assert 'data-testid="bulk-state">queued</span>' in made.text
        assert 'hx-trigger="every 1s"' in made.text  # it follows the operation
        [operation] = (await http.get("/v1/bulk-operations", headers=keys.op)).json()["items"]
        assert operation["action"] == "resume"
        assert operation["job_count"] == 2
        assert operation["note"] == "destination back"
        progress = await http.get(f"/ui/ops/bulk/{operation['id']}")
        assert progress.status_code == 200
        assert (await http.get("/ui/ops/bulk/not-an-id")).status_code == 404

        no_token = await http.post(
            "/ui/ops/bulk", content=urlencode([*checked[1:], ("csrf_token", "x")]), headers=FORM
        )
        assert no_token.status_code == 403
        in_panel = await http.post(
            "/ui/ops/bulk/preview", data=form, headers={**SAME_ORIGIN, "HX-Request": "true"}
        )
        assert in_panel.status_code == 200  # shown in the panel, where htmx swaps it
        assert "Check at least one job" in in_panel.text


async def test_the_jobs_of_every_owner_page_older_by_id_once_each(
    app: FastAPI, keys: Keys, jobs: JobFactory
) -> None:
    """The page of every owner's jobs pages by id (its Older link's cursor is the id
    walk's): following it shows each job once; one owner's cursor there is refused."""
    made = [
        (await jobs.make(JobState.UNRESOLVED, owner="alice" if i % 2 else "bob")).id
        for i in range(30)
    ]
    async with browser(app) as http:
        await log_in(http, keys.operator)
        first = await http.get("/ui/ops/jobs", params={"state": "unresolved"})
        assert first.status_code == 200, first.text
        older = re.search(r'href="/ui/ops/jobs\?([^"]*)"', first.text)
        assert older is not None, first.text
        query = older.group(1).replace("&amp;", "&")
        assert re.search(r"cursor=i[0-9a-f]{32}", query), query
        await jobs.make(JobState.UNRESOLVED, owner="alice")  # a newer job between pages
        second = await http.get(f"/ui/ops/jobs?{query}")
        assert second.status_code == 200, second.text
        assert 'href="/ui/ops/jobs?' not in second.text  # the last page
        shown = re.findall(r'data-testid="ops-job-row"', first.text + second.text)
        assert len(shown) == len(made)
        for job_id in made:  # on exactly one of the two pages
            assert (str(job_id) in first.text) != (str(job_id) in second.text), job_id
        assert str(made[-1]) in first.text  # newest first
        refused = await http.get("/ui/ops/jobs", params={"state": "unresolved", "cursor": "c5"})
        assert refused.status_code == 422


async def test_the_finished_range_and_reason_filters_narrow_the_jobs_of_every_owner(
    app: FastAPI, keys: Keys, engine: AsyncEngine, jobs: JobFactory
) -> None:
    """The page filters as ``GET /v1/jobs`` does by reason and by when a job finished
    (half-open ranges with a zone), shows the filter back in its form, carries it to the
    bulk form, and refuses a bad one naming the field."""
    old_failure = await jobs.make(JobState.FAILED, owner="alice")
    new_failure = await jobs.make(JobState.FAILED, owner="bob")
    published = await jobs.make(JobState.SUCCEEDED, owner="bob")
    stuck = await jobs.make(JobState.UNRESOLVED, owner="alice")
    queued = await jobs.make(JobState.QUEUED, owner="bob")
    async with engine.begin() as conn:  # one job finished two days ago
        await conn.execute(
            text("UPDATE jobs SET finished_at = finished_at - interval '2 days' WHERE id = :id"),
            {"id": old_failure.id},
        )
    now = datetime.now(UTC)
    day_ago = (now - timedelta(days=1)).isoformat()
    three_days_ago = (now - timedelta(days=3)).isoformat()
    made = {old_failure.id, new_failure.id, published.id, stuck.id, queued.id}

    async with browser(app) as http:
        csrf = await log_in(http, keys.operator)

        async def rows(*params: tuple[str, str]) -> set[uuid.UUID]:
            listed = await http.get("/ui/ops/jobs", params=list(params))
            assert listed.status_code == 200, listed.text
            shown = {
                uuid.UUID(found)
                for found in re.findall(r'name="job_id" value="([0-9a-f-]{36})"', listed.text)
            }
            assert listed.text.count('data-testid="ops-job-row"') == len(shown)
            return shown

        assert await rows() == made
        assert await rows(("finished_after", day_ago)) == {new_failure.id, published.id}
        assert await rows(("finished_before", day_ago)) == {old_failure.id}
        assert await rows(("finished_after", three_days_ago), ("finished_before", day_ago)) == {
            old_failure.id
        }
        assert await rows(("reason", "retries_exhausted")) == {stuck.id}
        assert await rows(("reason", "error")) == {old_failure.id, new_failure.id}
        assert await rows(("reason", "error"), ("finished_after", day_ago)) == {new_failure.id}
        assert await rows(("reason", "published"), ("owner", "alice")) == set()
        assert await rows(("reason", ""), ("finished_after", "")) == made  # blank: no filter

        shown = await http.get(
            "/ui/ops/jobs", params={"reason": "error", "finished_after": day_ago}
        )
        assert '<option value="error" selected>error</option>' in shown.text
        assert f'name="finished_after" value="{day_ago}"' in shown.text
        kept = urlencode([("reason", "error"), ("finished_after", day_ago)])
        assert f'name="filter" value="{html.escape(kept)}"' in shown.text
        every = await http.post(  # the bulk form's "every job matching the filter"
            "/ui/ops/bulk/preview",
            data={"csrf_token": csrf, "filter": kept, "action": "replay", "selection": "filter"},
            headers=SAME_ORIGIN,
        )
        assert every.status_code == 200, every.text
        assert 'data-testid="bulk-matched">1</span>' in every.text
        assert str(new_failure.id) in every.text
        assert str(old_failure.id) not in every.text

        for params, field in (
            ({"reason": "whim"}, "reason"),
            ({"finished_after": "yesterday"}, "finished_after"),
            ({"finished_before": "2026-12-01T00:00:00"}, "finished_before"),  # no zone
            (
                {
                    "finished_after": "2026-12-02T00:00:00Z",
                    "finished_before": "2026-12-01T00:00:00Z",
                },
                "finished_before",
            ),
        ):
            refused = await http.get("/ui/ops/jobs", params=params)
            assert refused.status_code == 422, (params, refused.text)
            assert field in refused.text, params
