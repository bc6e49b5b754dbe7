"""What the job pages show beyond the status (httpx against the app, a real PostgreSQL):
the job's input to its owner and to no one else, a failed job's attempt line, a result
without files, the submit form's server-side validation, and the layout's links."""

from __future__ import annotations

import html
import json
import uuid

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._app.transitions import Transitions
from tests.api.support import BUNDLE_INPUT, WORKER, Driver, Keys
from tests.ui.conftest import SAME_ORIGIN, log_in
from tests.ui.test_pages import browser, create_job


async def test_the_input_is_shown_to_its_owner_only(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create_job(client, keys.alice)
    async with browser(app) as alice:
        await log_in(alice, keys.alice)
        page = (await alice.get(f"/ui/jobs/{job_id}")).text
        assert 'data-testid="input"' in page
        shown = page.split('<pre class="json">', 1)[1].split("</pre>", 1)[0]
        assert json.loads(html.unescape(shown)) == BUNDLE_INPUT
        assert f'<code title="{job_id}">{job_id[:8]}</code>' in page
        assert f'data-copy="{job_id}"' in page
    async with browser(app) as operator:
        await log_in(operator, keys.operator)
        page = (await operator.get(f"/ui/jobs/{job_id}")).text
        assert 'data-testid="state"' in page  # the operator sees the job ...
        assert 'data-testid="input"' not in page  # ... but not alice's input


async def test_a_failed_job_says_no_retry_follows(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await create_job(client, keys.alice)
    await driver.fail(uuid.UUID(job_id))
    async with browser(app) as alice:
        await log_in(alice, keys.alice)
        page = (await alice.get(f"/ui/jobs/{job_id}")).text
    assert "; no retry follows: the error is permanent</dd>" in page
    assert 'data-testid="elapsed">ran ' in page


async def test_the_submit_form_validates_on_the_server(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    async with browser(app) as alice:
        csrf = await log_in(alice, keys.alice)
        form = await alice.get("/ui/submit?kind=atlas.bundle")
        assert form.status_code == 200
        assert "<code>preset</code> <small>required</small>" in form.text

        async def post(data: dict[str, str]) -> httpx.Response:
            return await alice.post("/ui/submit", data=data, headers=SAME_ORIGIN)

        too_many = {**BUNDLE_INPUT, "pages": ["cover", "summary", "cover"]}
        refused = await post(
            {"csrf_token": csrf, "kind": "atlas.bundle", "input": json.dumps(too_many)}
        )
        assert refused.status_code == 422
        assert "input.pages: List should have at most 2 items" in refused.text
        assert json.dumps(too_many) in refused.text.replace("&#34;", '"')  # kept to correct
        unknown = await post({"csrf_token": csrf, "kind": "no.such", "input": "{}"})
        assert unknown.status_code == 422
        assert "Unknown kind" in unknown.text
        not_an_object = await post({"csrf_token": csrf, "kind": "atlas.noop", "input": "[1]"})
        assert not_an_object.status_code == 422
        assert "The input must be a JSON object" in not_an_object.text
        forged = await post({"kind": "atlas.noop", "input": "{}"})
        assert forged.status_code == 403

        made = await post({"csrf_token": csrf, "kind": "atlas.noop", "input": '{"tag": "ui"}'})
        assert made.status_code == 303
        job_id = made.headers["location"].rsplit("/", 1)[1]
    status = await client.get(f"/v1/jobs/{job_id}", headers=Keys.header(keys.alice))
    assert status.status_code == 200
    assert status.json()["kind"] == "atlas.noop"


async def test_the_layout_links_the_api_docs_and_a_favicon(app: FastAPI, keys: Keys) -> None:
    async with browser(app) as anyone:
        login = await anyone.get("/ui/login")
        assert '<link rel="icon" href="/ui/static/favicon.svg"' in login.text
        assert 'href="/docs"' in login.text
        icon = await anyone.get("/ui/static/favicon.svg")
        assert icon.status_code == 200
        await log_in(anyone, keys.alice)
        jobs = await anyone.get("/ui/jobs")
        assert 'href="/docs" data-testid="api-docs"' in jobs.text
        assert 'href="/ui/submit"' in jobs.text


async def _publish(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    transitions: Transitions,
    engine: AsyncEngine,
    result_ref: dict[str, object],
) -> str:
    """A job of alice's, claimed and published with ``result_ref`` by hand."""
    job_id = await create_job(client, keys.alice)
    job = uuid.UUID(job_id)
    attempt = await driver.claim(job)
    async with engine.begin() as conn:
        staged = await transitions.stage_output(
            conn, job, attempt, DeliveryState.STAGED_PRIVATE, actor=WORKER
        )
        assert staged.ok
    async with engine.begin() as conn:
        assert await transitions.lock_for_publication(conn, job, attempt)
        published = await transitions.publish(
            conn, job, attempt, result_ref=result_ref, ttl_seconds=60, actor=WORKER
        )
        assert published.ok
    return job_id


async def test_a_result_without_files_reads_as_finished_on_its_page_and_in_the_list(
    app: FastAPI,
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    transitions: Transitions,
    engine: AsyncEngine,
) -> None:
    bare = await _publish(client, keys, driver, transitions, engine, {"files": []})
    receipt = {
        "destination": "press",
        "operation_id": str(uuid.uuid4()),
        "settled": "confirmed",
        "receipt": {"id": "R-12"},
    }
    pressed = await _publish(
        client, keys, driver, transitions, engine, {"files": [], "publication": receipt}
    )
    # The status says what the result holds, so a row needs no read of the result.
    statuses = {
        job: (await client.get(f"/v1/jobs/{job}", headers=keys.a)).json()["delivery"]
        for job in (bare, pressed)
    }
    assert {k: statuses[bare][k] for k in ("state", "files", "destination")} == {
        "state": "available",
        "files": 0,
        "destination": None,
    }
    assert (statuses[pressed]["files"], statuses[pressed]["destination"]) == (0, "press")
    async with browser(app) as alice:
        await log_in(alice, keys.alice)
        page = (await alice.get(f"/ui/jobs/{bare}")).text
        pressed_page = (await alice.get(f"/ui/jobs/{pressed}")).text
        listing = (await alice.get("/ui/jobs")).text
    assert 'data-testid="label">Finished (no files)<' in page
    assert "Ready — download" not in page
    assert 'data-testid="label">Finished — published to press, receipt R-12<' in pressed_page
    assert "Finished (no files)" in listing
    assert "Finished — published to press" in listing
    assert "Ready — download" not in listing
