"""Long-polls and event streams fan out from one read per change (a reliability finding).

Before: every change woke every subscriber and each re-read the job through the pool
(3 x 1,000 watchers gave hundreds of 500s); nothing bounded watchers per key; and an
event stream stopped after 1,000 history rows. Statements are counted at the driver
(``before_cursor_execute`` on the app's engine), as in ``test_round_trips``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.services.feeds import FeedHub
from atlas_jobs._app.services.snapshots import HISTORY_KEPT
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.transitions import Actor
from tests.api.conftest import LiveApi
from tests.api.support import BUNDLE_INPUT, Driver, Keys, parse_sse
from tests.sent_statements import API_BACKGROUND_TASKS, statements

BUNDLE = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
JOB_READ = re.compile(r"\bFROM jobs\b")
WATCHERS = 50


def wait(tag: str = "*") -> dict[str, str]:
    """A long-poll held until the job's version differs from ``tag`` ("*": any change)."""
    return {"Prefer": "wait=5", "If-None-Match": tag}


def hub(app: FastAPI) -> FeedHub:
    feeds: FeedHub = app.state.atlas.feeds
    return feeds


async def until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def create(client: httpx.AsyncClient, headers: dict[str, str]) -> uuid.UUID:
    created = await client.post("/v1/jobs", json=BUNDLE, headers=headers)
    assert created.status_code == 202, created.text
    return uuid.UUID(created.json()["id"])


async def cancel(driver: Driver, job_id: uuid.UUID) -> None:
    """A change made beside the API (its own engine), as a worker's would be."""
    async with driver.engine.begin() as conn:
        assert (await driver.t.request_cancel(conn, job_id, actor=Actor("client", "alice"))).ok


FEW = 2
"""Long-polls of the run a fifty-watcher run is compared with."""
SLACK = 1
"""Feed reads a loaded machine may add to a change's, whatever the number of watchers: the
first read still under way when the change is made, or a re-read once the LISTEN
connection (re)connects."""


async def hold_long_polls_over_a_claim(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver, watchers: int
) -> tuple[int, list[str]]:
    """``watchers`` long-polls held on a new job, answered by one change (its claim): the
    feed reads made meanwhile and the statements the app sent over the change."""
    job_id = await create(client, keys.a)
    tag = (await client.get(f"/v1/jobs/{job_id}", headers=keys.a)).headers["etag"]
    held = {**keys.a, "Prefer": "wait=5", "If-None-Match": tag}
    feeds = hub(app)
    reads_before = feeds.reads
    polls = [
        asyncio.create_task(client.get(f"/v1/jobs/{job_id}", headers=held)) for _ in range(watchers)
    ]
    await until(lambda: feeds.caps.watching == watchers, "every long-poll to be held")
    # (a watcher is counted before the feed's first read returns: wait for that read)
    await until(lambda: feeds.reads > reads_before, "the feed's first read")
    with statements(app.state.atlas.engine, except_task=API_BACKGROUND_TASKS) as sent:
        await driver.claim(job_id)
        answers = await asyncio.gather(*polls)
    assert [a.status_code for a in answers] == [200] * watchers
    assert {a.headers["etag"] for a in answers} == {'W/"2"'} != {tag}
    assert {a.json()["state"] for a in answers} == {"running"}
    assert {a.headers["preference-applied"] for a in answers} == {"wait=5"}
    assert feeds.caps.watching == 0
    assert feeds.feeds == 0
    return feeds.reads - reads_before, sent


async def test_fifty_long_polls_share_one_read_per_change(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    """What a change costs does not grow with the number of long-polls it answers: the
    feed's first read and one read for the change (the job and its new history; no stages
    without a plan), give or take :data:`SLACK` reads on a loaded machine -- never one
    per watcher."""
    few_reads, few_sent = await hold_long_polls_over_a_claim(app, client, keys, driver, FEW)
    many_reads, many_sent = await hold_long_polls_over_a_claim(app, client, keys, driver, WATCHERS)
    changes = 1
    for reads, sent in ((few_reads, few_sent), (many_reads, many_sent)):
        assert 1 + changes <= reads <= 1 + changes + SLACK, (reads, sent)
        job_reads = [s for s in sent if JOB_READ.search(s)]
        assert changes <= len(job_reads) <= changes + SLACK, sent
        others = [s for s in sent if not JOB_READ.search(s)]
        assert all(s.startswith("SELECT job_history.") for s in others), sent
        assert len(sent) <= 2 * (changes + SLACK), sent  # a job and a history read each
    assert many_reads <= few_reads + SLACK, "more watchers cost more feed reads"
    assert len(many_sent) <= len(few_sent) + 2 * SLACK, "more watchers cost more statements"


async def test_fifty_event_streams_share_one_read_per_change(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job_id = await create(client, keys.a)
    feeds = hub(app)
    streams = [
        asyncio.create_task(client.get(f"/v1/jobs/{job_id}/events", headers=keys.a))
        for _ in range(WATCHERS)
    ]
    await until(lambda: feeds.caps.watching == WATCHERS, "every stream to be open")
    await until(lambda: feeds.reads >= 1, "the feed's first read")
    assert feeds.reads == 1
    with statements(app.state.atlas.engine, except_task=API_BACKGROUND_TASKS) as sent:
        await cancel(driver, job_id)  # queued -> canceled: a transition, and the end
        answers = await asyncio.gather(*streams)
    for answer in answers:
        assert answer.status_code == 200
        events = parse_sse(answer.text)
        assert [json.loads(e["data"])["to"] for e in events] == ["queued", "canceled"]
    assert len([s for s in sent if JOB_READ.search(s)]) == 1, sent
    # The change costs one job read and one history read, shared by every stream. On a
    # loaded machine a stream may be counted as watching before it took the feed's first
    # snapshot; it then starts from the newer one and catches up with a history page of
    # its own -- reads of the backlog, never of the job.
    others = [s for s in sent if not JOB_READ.search(s)]
    assert others, sent
    assert all(s.startswith("SELECT job_history.") for s in others), sent
    assert feeds.caps.watching == 0
    assert feeds.feeds == 0


async def test_a_listen_reconnect_refreshes_each_feed_once(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, database_url: str
) -> None:
    """Changes made while the LISTEN connection was down were never announced: every
    feed re-reads once -- not every watcher."""
    jobs = [await create(client, keys.a) for _ in range(2)]
    feeds = hub(app)
    tags: dict[uuid.UUID, str] = {}
    for job in jobs:
        tags[job] = (await client.get(f"/v1/jobs/{job}", headers=keys.a)).headers["etag"]
    polls = [
        asyncio.create_task(client.get(f"/v1/jobs/{job}", headers={**keys.a, **wait(tags[job])}))
        for job in jobs
        for _ in range(10)
    ]
    await until(lambda: feeds.caps.watching == 20, "every long-poll to be held")
    # A slot is taken before the feed's first read; on a busy machine that read may
    # still be under way: wait for it, then the count must be exactly one per job.
    await until(lambda: feeds.reads >= 2, "each feed's first read")
    assert feeds.reads == 2
    listener = app.state.atlas.notifier.listener
    async with app.state.atlas.engine.connect() as conn:
        await conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'atlas-api-listener' AND datname = current_database()"
            )
        )
    await until(lambda: listener.connections == 2, "the listener to reconnect")
    await until(lambda: feeds.reads == 4, "each feed to re-read")
    await asyncio.sleep(0.3)
    assert feeds.reads == 4
    assert all(not p.done() for p in polls), "nothing changed: the long-polls still wait"
    answers = await asyncio.gather(*polls)
    assert {a.status_code for a in answers} == {304}


@pytest.fixture
async def capped_app(api_settings: Settings, clock: Clock) -> AsyncIterator[FastAPI]:
    settings = api_settings.model_copy(update={"watch_max_per_key": 3, "watch_max_total": 5})
    application = create_app(settings, clock=clock)
    async with application.router.lifespan_context(application):
        yield application


async def test_watchers_are_capped_per_key_and_per_process(capped_app: FastAPI, keys: Keys) -> None:
    transport = httpx.ASGITransport(app=capped_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://atlas.test") as client:
        alice_job = await create(client, keys.a)
        bob_job = await create(client, keys.b)
        feeds = hub(capped_app)

        def poll(job: uuid.UUID, headers: dict[str, str]) -> asyncio.Task[httpx.Response]:
            return asyncio.create_task(client.get(f"/v1/jobs/{job}", headers={**headers, **wait()}))

        alice = [poll(alice_job, keys.a) for _ in range(2)]
        stream = client.get(f"/v1/jobs/{alice_job}/events", headers=keys.a)
        alice.append(asyncio.create_task(stream))
        await until(lambda: feeds.caps.watching == 3, "alice's three watchers")

        over_key = await client.get(f"/v1/jobs/{alice_job}", headers={**keys.a, **wait()})
        assert over_key.status_code == 429
        assert over_key.headers["content-type"] == "application/problem+json"
        assert over_key.json()["type"] == "urn:atlas-jobs:problem:too-many-watchers"
        assert int(over_key.headers["retry-after"]) > 0
        stream_over_key = await client.get(f"/v1/jobs/{alice_job}/events", headers=keys.a)
        assert stream_over_key.status_code == 429
        plain = await client.get(f"/v1/jobs/{alice_job}", headers=keys.a)
        assert plain.status_code == 200, "a read without wait is not a watcher"

        bob = [poll(bob_job, keys.b) for _ in range(2)]  # another key still gets in
        await until(lambda: feeds.caps.watching == 5, "bob's two watchers")

        over_total = await client.get(f"/v1/jobs/{bob_job}/events", headers=keys.op)
        assert over_total.status_code == 503
        assert over_total.json()["type"] == "urn:atlas-jobs:problem:watchers-exhausted"
        assert int(over_total.headers["retry-after"]) > 0
        assert feeds.caps.watching == 5, "a refused watcher holds no slot"

        for task in [*alice, *bob]:  # the clients go away mid-wait
            task.cancel()
        await asyncio.gather(*alice, *bob, return_exceptions=True)
        await until(lambda: feeds.caps.watching == 0, "every slot to be given back")
        assert feeds.feeds == 0

        again = await client.get(
            f"/v1/jobs/{alice_job}", headers={**keys.a, "Prefer": "wait=1", "If-None-Match": "*"}
        )
        assert again.status_code == 304
        assert feeds.caps.watching == 0


async def test_another_owners_job_is_404_for_a_watcher_too(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    job_id = await create(client, keys.a)
    held = {"Prefer": "wait=2"}
    assert (await client.get(f"/v1/jobs/{job_id}", headers={**keys.b, **held})).status_code == 404
    assert (await client.get(f"/v1/jobs/{job_id}/events", headers=keys.b)).status_code == 404
    unknown = uuid.uuid4()
    assert (await client.get(f"/v1/jobs/{unknown}", headers={**keys.a, **held})).status_code == 404
    operator = await client.get(f"/v1/jobs/{job_id}", headers={**keys.op, "Prefer": "wait=0"})
    assert operator.status_code == 200
    assert hub(app).caps.watching == 0


async def scrape_watchers(http: httpx.AsyncClient) -> int:
    found = re.search(r"^atlas_watchers (\S+)$", (await http.get("/metrics")).text, re.M)
    assert found is not None
    return int(float(found.group(1)))


async def test_disconnected_streams_give_their_slots_back(live_api: LiveApi, keys: Keys) -> None:
    """Over real HTTP: clients that drop their connections leave no watcher behind."""
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        job_id = await create(http, keys.a)
        clients = [httpx.AsyncClient(base_url=live_api.url, timeout=30) for _ in range(10)]
        opened: list[Any] = []
        for index, other in enumerate(clients):
            if index % 2:
                request = other.build_request("GET", f"/v1/jobs/{job_id}/events", headers=keys.a)
            else:
                held = {**keys.a, "Prefer": "wait=3", "If-None-Match": "*"}
                request = other.build_request("GET", f"/v1/jobs/{job_id}", headers=held)
            opened.append(asyncio.create_task(other.send(request, stream=True)))
        deadline = time.monotonic() + 10
        while await scrape_watchers(http) < 10:
            assert time.monotonic() < deadline, "the watchers never opened"
            await asyncio.sleep(0.05)
        for task in opened:
            task.cancel()
        await asyncio.gather(*opened, return_exceptions=True)
        for other in clients:
            await other.aclose()  # the connections close under the waiting requests
        deadline = time.monotonic() + 10  # long-polls notice at their wait's end (3 s)
        while await scrape_watchers(http) != 0:
            assert time.monotonic() < deadline, "a disconnected watcher kept its slot"
            await asyncio.sleep(0.1)


async def test_a_bystander_is_answered_while_300_long_polls_wait(
    live_api: LiveApi, keys: Keys
) -> None:
    """Before: thousands of watchers re-reading through the pool held a bystander's
    GET for 27 s. Three keys hold 100 long-polls each (the per-key cap)."""
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=400)
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30, limits=limits) as http:
        alice_job, bob_job = await create(http, keys.a), await create(http, keys.b)
        held = {"Prefer": "wait=5", "If-None-Match": "*"}
        waiting = [
            asyncio.create_task(http.get(f"/v1/jobs/{job}", headers={**headers, **held}))
            for job, headers in ((alice_job, keys.a), (bob_job, keys.b), (alice_job, keys.op))
            for _ in range(100)
        ]
        deadline = time.monotonic() + 60  # liveness only: a busy machine admits slowly
        while await scrape_watchers(http) < 300:
            assert time.monotonic() < deadline, "the long-polls never all waited"
            await asyncio.sleep(0.1)
        started = time.monotonic()
        bystander = await http.get(f"/v1/jobs/{alice_job}", headers=keys.a)
        took = time.monotonic() - started
        assert bystander.status_code == 200
        assert not any(task.done() for task in waiting), "the bystander came back first"
        assert took < 5, f"the bystander took {took:.1f} s, longer than the long-polls wait"
        answers = await asyncio.gather(*waiting)
    assert {a.status_code for a in answers} == {304}


async def test_an_event_stream_resumes_across_more_history_than_a_feed_holds(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    """Before: ``/events`` stopped after 1,000 transitions (a reliability finding)."""
    job_id = await create(client, keys.a)
    await cancel(driver, job_id)
    extra = 2 * HISTORY_KEPT + 500
    async with driver.engine.begin() as conn:  # cheap: copies of the first row
        await conn.execute(
            text(
                "INSERT INTO job_history (job_id, at, transition, from_state, to_state, reason, "
                "actor) SELECT job_id, at, transition, from_state, to_state, reason, actor "
                "FROM job_history, generate_series(1, :extra) "
                "WHERE job_id = :job AND from_state IS NULL"
            ),
            {"extra": extra, "job": job_id},
        )
    everything = parse_sse((await client.get(f"/v1/jobs/{job_id}/events", headers=keys.a)).text)
    assert len(everything) == extra + 2
    seqs = [int(e["id"]) for e in everything]
    assert seqs == sorted(set(seqs))

    resumed = await client.get(
        f"/v1/jobs/{job_id}/events", headers={**keys.a, "Last-Event-ID": str(seqs[0])}
    )
    assert [int(e["id"]) for e in parse_sse(resumed.text)] == seqs[1:]
