"""Feeds while the database is away, and held reads whose client leaves.

The API talks to PostgreSQL through a real TCP proxy (:mod:`chaos.proxy`) that the
test can make refuse new connections and reset open ones, so "the database is down" is
a real connection failure, not a stub. Before the fixes:

- the first read of a new feed failing answered ``500`` (an outage elsewhere is ``503``
  ``database-unavailable`` + ``Retry-After``);
- a feed whose database went away logged a warning and re-read every second, without
  the backoff every other reconnect loop uses;
- a held long-poll whose client disconnected kept its watcher slot until its wait ended.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
import structlog
from fastapi import FastAPI
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from structlog.testing import capture_logs

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.listen import Backoff
from atlas_jobs._app.services.feeds import FeedHub
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor, Transitions
from chaos.proxy import TcpProxy
from tests.api.conftest import SIGNING_SECRET, LiveApi
from tests.api.support import BUNDLE_INPUT, Keys
from tests.support import atlas_process, free_port

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def until(condition: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    url = make_url(database_url)
    tcp = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    tcp.spare = b"atlas-api-listener"  # the API's LISTEN connection is never cut here
    await tcp.start()
    yield tcp
    await tcp.close()


@pytest.fixture
async def proxied_app(
    api_settings: Settings, clock: Clock, proxy: TcpProxy
) -> AsyncIterator[FastAPI]:
    through = make_url(api_settings.database_url).set(host="127.0.0.1", port=proxy.port)
    settings = api_settings.model_copy(
        update={"database_url": through.render_as_string(hide_password=False)}
    )
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def proxied(proxied_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=proxied_app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as http:
        yield http


def hub(app: FastAPI) -> FeedHub:
    feeds: FeedHub = app.state.atlas.feeds
    return feeds


async def test_a_feeds_first_read_failing_is_503_database_unavailable(
    proxied_app: FastAPI, proxied: httpx.AsyncClient, proxy: TcpProxy, keys: Keys
) -> None:
    created = await proxied.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    feeds = hub(proxied_app)
    # The key is authenticated on a pooled connection that stays up; the feed's first
    # read needs another one, and the database refuses it.
    original = feeds.read

    async def read_after_the_database_left(*args: object) -> object:
        proxy.refusing = True
        proxy.drop_all()
        return await original(*args)  # type: ignore[arg-type]

    feeds.read = read_after_the_database_left  # type: ignore[method-assign]
    with capture_logs() as logs:
        held = await proxied.get(f"/v1/jobs/{job_id}", headers={**keys.a, "Prefer": "wait=2"})
    assert held.status_code == 503, held.text
    assert held.headers["content-type"] == "application/problem+json"
    assert held.json()["type"] == "urn:atlas-jobs:problem:database-unavailable"
    assert int(held.headers["retry-after"]) > 0
    # Answered as an outage by the error tree, not as a crash: the access log and the
    # request metrics say 503 too (before: 500, and an "unexpected error" path).
    [access] = [e for e in logs if e["event"] == "request"]
    assert access["status"] == 503
    assert feeds.caps.watching == 0, "the refused watcher gave its slot back"
    assert feeds.feeds == 0, "a feed that never read is not kept"


async def test_an_outage_503_is_logged_counted_and_timed_as_503_with_its_request_id(
    proxied_app: FastAPI, proxied: httpx.AsyncClient, proxy: TcpProxy, keys: Keys
) -> None:
    """The unexpected-error handler used to run outside the request-context middleware:
    the client got 503 database-unavailable, but the access log and
    atlas_http_requests_total said 500, the latency histogram missed it, and the answer
    had no X-Request-ID. Now every answer is recorded with the status the client got."""
    created = await proxied.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]
    # The key is cached by the first request; the read needs a new connection.
    proxy.refusing = True
    proxy.drop_all()
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        down = await proxied.get(
            f"/v1/jobs/{job_id}", headers={**keys.a, "X-Request-ID": "outage-1"}
        )
    assert down.status_code == 503, down.text
    assert down.json()["type"] == "urn:atlas-jobs:problem:database-unavailable"
    assert int(down.headers["retry-after"]) > 0
    assert down.headers["x-request-id"] == "outage-1"
    [access] = [e for e in logs if e["event"] == "request"]
    assert (access["status"], access["request_id"]) == (503, "outage-1")
    [warning] = [e for e in logs if e["event"] == "database_unavailable"]
    assert warning["request_id"] == "outage-1"
    registry = proxied_app.state.atlas.metrics.registry
    route = {"method": "GET", "route": "/v1/jobs/{job_id}"}
    assert registry.get_sample_value("atlas_http_requests_total", {**route, "status": "503"}) == 1
    assert (
        registry.get_sample_value("atlas_http_requests_total", {**route, "status": "500"}) is None
    )
    timed = registry.get_sample_value("atlas_http_request_duration_seconds_count", route)
    assert timed == 1


async def test_a_feed_backs_off_while_the_database_is_down_and_recovers(
    proxied_app: FastAPI,
    proxied: httpx.AsyncClient,
    proxy: TcpProxy,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    feeds = hub(proxied_app)
    feeds.backoff = Backoff(initial_seconds=0.05, max_seconds=0.4, healthy_seconds=60)
    created = await proxied.post("/v1/jobs", json=BUNDLE, headers=keys.a)
    job_id = uuid.UUID(created.json()["id"])
    held = {**keys.a, "Prefer": "wait=30", "If-None-Match": created.headers["etag"]}
    with capture_logs() as logs:
        poll = asyncio.create_task(proxied.get(f"/v1/jobs/{job_id}", headers=held))
        await until(
            lambda: any(f.snapshot is not None for f in feeds._feeds.values()),
            "the feed's first read",
        )
        # Every connection of the API but its LISTEN one goes away, and new ones are
        # refused; the job then changes (beside the API): the feed hears it, its read fails.
        proxy.refusing = True
        proxy.drop_all()
        async with engine.begin() as conn:
            await transitions.request_cancel(conn, job_id, actor=Actor("client", "alice"))
        await until(lambda: feeds.read_failures >= 6, "six failed re-reads")
        proxy.refusing = False
        await until(
            lambda: any(e["event"] == "feed.read_recovered" for e in logs), "the feed to recover"
        )
        answer = await poll
    assert answer.status_code == 200, "the held read saw the change once the feed read again"
    assert answer.json()["state"] == "canceled"
    failed = [e for e in logs if e["event"] == "feed.read_failed"]
    assert [e["log_level"] for e in failed][:2] == ["warning", "debug"], "one warning per outage"
    assert all(e["error_class"] for e in failed)
    counts = [e["consecutive_failures"] for e in failed]
    assert counts == list(range(1, len(counts) + 1))
    pauses = [e["retry_in_seconds"] for e in failed]
    bounds = [feeds.backoff.bound(n) for n in counts]
    assert all(b / 2 - 0.001 <= p <= b + 0.001 for p, b in zip(pauses, bounds, strict=True))
    assert max(pauses) > 2 * feeds.backoff.initial_seconds, "the pauses grew"
    [recovered] = [e for e in logs if e["event"] == "feed.read_recovered"]
    assert recovered["failures"] == len(failed)
    assert not [e for e in logs if e["log_level"] == "error"]


@pytest.fixture
def long_wait_api(database_url: str, data_dir: Path, tmp_path: Path) -> Iterator[LiveApi]:
    """A real API process whose long-polls may wait 10 minutes."""
    port = free_port()
    log_path = tmp_path / "api.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_SIGNING_SECRET": SIGNING_SECRET,
        "ATLAS_LOG_FORMAT": "json",
        "ATLAS_MAX_WAIT_SECONDS": "600",
        "ATLAS_SHUTDOWN_GRACE_SECONDS": "1",
    }
    url = f"http://127.0.0.1:{port}"
    args = ["api", "--port", str(port)]
    with atlas_process(args, env=env, log_path=log_path, ready_url=f"{url}/livez") as process:
        yield LiveApi(url, process, log_path)


async def watchers(http: httpx.AsyncClient) -> int:
    for line in (await http.get("/metrics")).text.splitlines():
        if line.startswith("atlas_watchers "):
            return int(float(line.split()[1]))
    raise AssertionError("no atlas_watchers in /metrics")


@pytest.mark.timeout(120)
async def test_a_disconnected_long_poll_frees_its_slot_before_its_wait_ends(
    long_wait_api: LiveApi, keys: Keys
) -> None:
    async with httpx.AsyncClient(base_url=long_wait_api.url, timeout=30) as http:
        created = await http.post("/v1/jobs", json=BUNDLE, headers=keys.a)
        job_id = uuid.UUID(created.json()["id"])
        held = {**keys.a, "Prefer": "wait=600", "If-None-Match": "*"}
        leaving = [httpx.AsyncClient(base_url=long_wait_api.url, timeout=700) for _ in range(5)]
        polls = [asyncio.create_task(c.get(f"/v1/jobs/{job_id}", headers=held)) for c in leaving]
        deadline = time.monotonic() + 30
        while await watchers(http) < 5:
            assert time.monotonic() < deadline, "the long-polls never started waiting"
            await asyncio.sleep(0.05)
        for task in polls:
            task.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        for c in leaving:
            await c.aclose()
        # Their waits end in 10 minutes; the slots must come back long before.
        deadline = time.monotonic() + 60
        while await watchers(http) != 0:
            assert time.monotonic() < deadline, "a disconnected long-poll kept its slot"
            await asyncio.sleep(0.1)
        stayed = await http.get(f"/v1/jobs/{job_id}", headers={**keys.a, "Prefer": "wait=1"})
        assert stayed.status_code == 200, "the API still answers held reads"
    lines = [json.loads(x) for x in long_wait_api.logs().splitlines() if x.startswith("{")]
    assert not [x for x in lines if x.get("log_level") == "error"], "no error logged"
