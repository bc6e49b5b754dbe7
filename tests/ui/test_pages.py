"""The status page over HTTP (httpx against the app, a real PostgreSQL): login and the
session cookie, CSRF and origin checks, owner scoping and roles, escaping, and the
labels of the one presentation function."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import list_keys, revoke_key
from atlas_jobs._app.db import reads
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.ui.session import COOKIE_NAME
from tests.api.support import BUNDLE_INPUT, Driver, Keys, commit_before
from tests.ui.conftest import BASE, SAME_ORIGIN, log_in

STATIC = Path(__file__).resolve().parents[2] / "app" / "ui" / "static"


async def create_job(client: httpx.AsyncClient, key: str) -> str:
    answer = await client.post(
        "/v1/jobs",
        json={"kind": "atlas.bundle", "input": BUNDLE_INPUT},
        headers=Keys.header(key),
    )
    assert answer.status_code == 202, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def browser(app: FastAPI, base: str = BASE) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base)


async def test_a_bad_key_is_refused_and_no_session_is_set(app: FastAPI, keys: Keys) -> None:
    async with browser(app) as http:
        answer = await http.post(
            "/ui/login", data={"api_key": keys.alice + "x"}, headers=SAME_ORIGIN
        )
        assert answer.status_code == 401
        assert "Unknown or revoked API key." in answer.text
        assert COOKIE_NAME not in http.cookies
        assert (await http.get("/ui/jobs")).status_code == 303


async def test_login_sets_a_strict_http_only_cookie_without_the_key(
    app: FastAPI, keys: Keys
) -> None:
    async with browser(app) as http:
        answer = await http.post(
            "/ui/login", data={"api_key": keys.alice, "next": "/ui/jobs"}, headers=SAME_ORIGIN
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ui/jobs"
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE_NAME}=")
        attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
        assert {"httponly", "path", "samesite", "max-age"} <= attributes
        assert "samesite=strict" in cookie.lower()
        assert "path=/ui" in cookie.lower()
        assert "secure" not in attributes  # plain http here
        value = http.cookies[COOKIE_NAME]
        assert keys.alice not in value
        assert keys.alice[6:] not in value
        assert hashlib.sha256(keys.alice.encode()).hexdigest() not in value
    async with browser(app, "https://atlas.test") as https:
        answer = await https.post(
            "/ui/login",
            data={"api_key": keys.alice},
            headers={"Origin": "https://atlas.test"},
        )
        assert "secure" in answer.headers["set-cookie"].lower()


async def test_pages_without_a_session_redirect_to_the_login(app: FastAPI) -> None:
    async with browser(app) as http:
        page = await http.get("/ui/jobs?state=running")
        assert page.status_code == 303
        assert page.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fstate%3Drunning"
        fragment = await http.get(f"/ui/jobs/{uuid.uuid4()}/panel", headers={"HX-Request": "true"})
        assert fragment.status_code == 401
        assert fragment.headers["HX-Redirect"].startswith("/ui/login?next=")
        forged = await http.get("/ui/jobs", headers={"Cookie": f"{COOKIE_NAME}=forged.value.sig"})
        assert forged.status_code == 303
        login = await http.get("/ui/login?next=https://evil.example/")
        assert 'name="next" value="/ui/jobs"' in login.text


async def test_login_goes_back_only_to_a_page_of_this_site(app: FastAPI, keys: Keys) -> None:
    wanted = f"/ui/jobs/{uuid.uuid4()}"
    for target, expected in [
        (wanted, wanted),
        ("/ui/jobs?state=running&kind=atlas.bundle", "/ui/jobs?state=running&kind=atlas.bundle"),
        ("https://evil.example/ui/", "/ui/jobs"),
        ("//evil.example/ui/", "/ui/jobs"),
        ("/ui//evil.example/", "/ui/jobs"),
        ("/ui/\\evil.example", "/ui/jobs"),
        ("/ui/jobs\r\nSet-Cookie: x=1", "/ui/jobs"),
        ("/v1/jobs", "/ui/jobs"),
    ]:
        async with browser(app) as http:
            answer = await http.post(
                "/ui/login", data={"api_key": keys.alice, "next": target}, headers=SAME_ORIGIN
            )
            assert answer.status_code == 303, target
            assert answer.headers["location"] == expected, target
            assert "x=1" not in answer.headers.get_list("set-cookie")[0]


async def test_posts_need_the_session_token_and_our_origin(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create_job(client, keys.alice)
    async with browser(app) as http:
        token = await log_in(http, keys.alice)
        cancel = f"/ui/jobs/{job_id}/cancel"
        missing = await http.post(cancel, headers=SAME_ORIGIN)
        assert missing.status_code == 403
        assert "security token" in missing.text
        wrong = await http.post(cancel, data={"csrf_token": token + "x"}, headers=SAME_ORIGIN)
        assert wrong.status_code == 403
        foreign = await http.post(
            cancel, data={"csrf_token": token}, headers={"Origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        cross_site = await http.post(
            cancel, data={"csrf_token": token}, headers={"Sec-Fetch-Site": "cross-site"}
        )
        assert cross_site.status_code == 403
        login_elsewhere = await http.post(
            "/ui/login", data={"api_key": keys.alice}, headers={"Origin": "https://evil.example"}
        )
        assert login_elsewhere.status_code == 403
        # Nothing was canceled by the refused posts.
        status = await client.get(f"/v1/jobs/{job_id}", headers=keys.a)
        assert status.json()["state"] == "queued"

        # The page's own post (htmx sends the token as a header) cancels.
        done = await http.post(
            cancel, headers={**SAME_ORIGIN, "X-CSRF-Token": token, "HX-Request": "true"}
        )
        assert done.status_code == 200, done.text
        assert 'data-testid="state">canceled<' in done.text
        assert 'data-testid="cancel"' not in done.text  # no button on a terminal job
        # A plain form post (no JavaScript) redirects back to the page.
        again = await http.post(cancel, data={"csrf_token": token}, headers=SAME_ORIGIN)
        assert again.status_code == 303
        assert again.headers["location"] == f"/ui/jobs/{job_id}"
    history = await client.get(f"/v1/jobs/{job_id}/history", headers=keys.a)
    cancels = [h for h in history.json()["items"] if h["transition"] == "request_cancel"]
    # The two accepted posts are recorded (the repeat too); the refused ones left nothing.
    assert [h["actor"] for h in cancels] == ["client:alice", "client:alice"]


async def test_a_revoked_key_logs_the_browser_out(
    app: FastAPI, engine: AsyncEngine, keys: Keys
) -> None:
    async with browser(app) as http:
        await log_in(http, keys.bob)
        assert (await http.get("/ui/jobs")).status_code == 200
        async with engine.begin() as conn:
            [bob] = [k for k in await list_keys(conn, owner="bob")]
            assert await revoke_key(conn, bob.id)
        page = await http.get("/ui/jobs")
        assert page.status_code == 303
        assert page.headers["location"].startswith("/ui/login")


async def test_another_owners_job_is_not_found_like_an_unknown_one(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    bobs = await create_job(client, keys.bob)
    async with browser(app) as http:
        await log_in(http, keys.alice)
        theirs = await http.get(f"/ui/jobs/{bobs}")
        unknown = await http.get(f"/ui/jobs/{uuid.uuid4()}")
        malformed = await http.get("/ui/jobs/not-a-job")
        for answer in (theirs, unknown, malformed):
            assert answer.status_code == 404
            assert "Not found" in answer.text
            assert answer.headers["content-type"].startswith("text/html")
        assert theirs.text == unknown.text
        panel = await http.get(f"/ui/jobs/{bobs}/panel")
        assert panel.status_code == 404
        token = await log_in(http, keys.alice)
        cancel = await http.post(
            f"/ui/jobs/{bobs}/cancel", data={"csrf_token": token}, headers=SAME_ORIGIN
        )
        assert cancel.status_code == 404
        # Only operators list another owner's jobs.
        assert (await http.get("/ui/jobs?owner=bob")).status_code == 403
    assert (await client.get(f"/v1/jobs/{bobs}", headers=keys.b)).json()["state"] == "queued"


async def test_operators_see_every_owner_and_the_queue_clients_do_not(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    alices = await create_job(client, keys.alice)
    async with browser(app) as http:
        await log_in(http, keys.alice)
        queue = await http.get("/ui/queue")
        assert queue.status_code == 403
        assert "operator role" in queue.text
        assert 'href="/ui/queue"' not in (await http.get("/ui/jobs")).text
    async with browser(app) as http:
        await log_in(http, keys.operator)
        job = await http.get(f"/ui/jobs/{alices}")
        assert job.status_code == 200
        assert 'data-testid="label">Queued<' in job.text
        listing = await http.get("/ui/jobs?owner=alice&state=queued")
        assert listing.status_code == 200
        assert alices in listing.text
        queue = await http.get("/ui/queue")
        assert queue.status_code == 200
        assert "atlas.bundle" in queue.text
        assert 'data-testid="queue"' in queue.text


async def test_the_page_shows_the_presentation_label_stages_and_history(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await create_job(client, keys.alice)
    attempt = await driver.claim(uuid.UUID(job_id))
    await driver.progress(uuid.UUID(job_id), attempt)
    status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).json()
    expected = present(status, Observation.FRESH).label
    assert expected == "Validating: 1 of 4 checks"
    async with browser(app) as http:
        await log_in(http, keys.alice)
        page = await http.get(f"/ui/jobs/{job_id}")
        assert page.status_code == 200
        text = page.text
        assert f'data-testid="label">{expected}<' in text
        assert 'data-testid="state">running<' in text
        assert 'data-testid="cancel"' in text  # a running job can be canceled
        assert 'data-testid="download"' not in text
        assert '<th scope="row">build</th><td>0</td><td>4</td>' in text
        assert "claim" in text
        assert f'sse-connect="/ui/jobs/{job_id}/live"' in text
        headers = page.headers
        assert headers["cache-control"] == "no-store"
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY"
        listing = await http.get("/ui/jobs?state=running&kind=atlas.bundle")
        assert job_id in listing.text
        assert expected in listing.text
        assert job_id not in (await http.get("/ui/jobs?state=queued")).text
        bad = await http.get("/ui/jobs?state=bogus")
        assert bad.status_code == 422


async def test_the_page_shows_one_version_of_the_job_and_its_history(
    app: FastAPI,
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A publication committed between the page's job read and its history read is
    shown by the next page, not half by this one."""
    job_id = uuid.UUID(await create_job(client, keys.alice))
    attempt = await driver.claim(job_id)
    async with browser(app) as http:
        await log_in(http, keys.alice)
        published = commit_before(
            monkeypatch,
            reads,
            "history_tail",
            lambda: driver.publish(job_id, attempt, "alice", {"bundle.zip": b"zip"}),
        )
        page = await http.get(f"/ui/jobs/{job_id}")
        assert published
        assert 'data-testid="state">running<' in page.text
        assert "<td>succeeded</td>" not in page.text
        monkeypatch.undo()
        page = await http.get(f"/ui/jobs/{job_id}")
        assert 'data-testid="state">succeeded<' in page.text
        assert "<td>succeeded</td>" in page.text


async def test_everything_shown_is_escaped(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create_job(client, keys.alice)
    note = '<script>alert("x")</script>'
    canceled = await client.post(f"/v1/jobs/{job_id}/cancel", json={"note": note}, headers=keys.op)
    assert canceled.status_code == 202, canceled.text
    async with browser(app) as http:
        await log_in(http, keys.alice)
        page = await http.get(f"/ui/jobs/{job_id}")
        assert note not in page.text
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page.text


async def test_the_vendored_scripts_are_served_and_match_their_versions_file(
    app: FastAPI,
) -> None:
    versions: dict[str, dict[str, Any]] = {}
    for line in (STATIC / "VERSIONS").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, package, version, sha256, _license = line.split()
            versions[name] = {"package": package, "version": version, "sha256": sha256}
    assert versions["htmx.min.js"]["version"] == "2.0.11"
    assert versions["htmx-ext-sse.min.js"]["version"] == "2.2.4"
    async with browser(app) as http:
        for name, entry in versions.items():
            served = await http.get(f"/ui/static/{name}")
            assert served.status_code == 200
            assert hashlib.sha256(served.content).hexdigest() == entry["sha256"], name
        assert (await http.get("/ui/static/nothing.js")).status_code == 404


async def test_the_pages_are_not_in_the_openapi_document(app: FastAPI) -> None:
    assert not [path for path in app.openapi()["paths"] if path.startswith("/ui")]


async def test_the_live_stream_pushes_the_panel_and_closes_when_settled(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create_job(client, keys.alice)
    assert (await client.post(f"/v1/jobs/{job_id}/cancel", headers=keys.a)).status_code == 202
    live = f"/ui/jobs/{job_id}/live"
    async with browser(app) as http:
        anonymous = await http.get(live, headers={"Accept": "text/event-stream"})
        assert anonymous.status_code == 401
        await log_in(http, keys.alice)
        stream = await http.get(live, headers={"Accept": "text/event-stream"})
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        text = stream.text
        assert text.startswith("retry: 2000")
        assert "event: panel" in text
        assert 'data-testid="state">canceled<' in text
        assert text.rstrip().endswith("event: done\ndata: settled")
        # The page of a settled job does not open the stream at all.
        assert "sse-connect" not in (await http.get(f"/ui/jobs/{job_id}")).text
    async with browser(app) as http:
        await log_in(http, keys.bob)
        assert (await http.get(live)).status_code == 404  # alice's job
    assert app.state.atlas.feeds.caps.watching == 0  # every slot given back


async def test_the_list_refreshes_and_logging_out_ends_the_session(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create_job(client, keys.alice)
    async with browser(app) as http:
        token = await log_in(http, keys.alice)
        page = await http.get("/ui/jobs?state=queued")
        assert 'hx-get="/ui/jobs/table?state=queued"' in page.text
        table = await http.get("/ui/jobs/table?state=queued", headers={"HX-Request": "true"})
        assert table.status_code == 200
        assert job_id in table.text
        assert "<html" not in table.text  # a fragment
        refused = await http.post("/ui/logout", headers=SAME_ORIGIN)
        assert refused.status_code == 403
        out = await http.post("/ui/logout", data={"csrf_token": token}, headers=SAME_ORIGIN)
        assert out.status_code == 303
        assert out.headers["location"] == "/ui/login"
        assert COOKIE_NAME not in http.cookies
        assert (await http.get("/ui/jobs")).status_code == 303
