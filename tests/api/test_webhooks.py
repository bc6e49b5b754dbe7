"""Webhooks over HTTP: registration (SSRF rules, secret once), ``notify`` at creation, the
outbox written with the transition, and deliveries sent, signed, retried and readable."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from atlas_jobs._app.api.main import create_app
from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import webhooks as store
from atlas_jobs._app.db.schema import webhook_deliveries
from atlas_jobs._app.services.views import status_document
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.webhooks import Resolver, Target, new_secret
from atlas_jobs._workers.pinned_transport import PinnedTransport
from atlas_jobs._workers.webhook_sender import WebhookSender
from tests.api.support import BUNDLE_INPUT, Driver, Keys
from tests.webhook_receiver import Receiver

FILES = {"manifest.json": b"{}", "bundle.zip": b"PK"}


@pytest.fixture
def api_settings(api_settings: Settings) -> Settings:
    """The suite's settings, with a receiver on 127.0.0.1 allowed (as an operator would
    configure it for a local receiver) and fast retries."""
    return api_settings.model_copy(
        update={
            "webhook_internal_hosts": "127.0.0.1",
            "webhook_max_attempts": 3,
            "webhook_backoff_base_seconds": 0.01,
            "webhook_backoff_cap_seconds": 0.01,
            "webhook_timeout_seconds": 2.0,
        }
    )


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    server = Receiver()
    await server.start()
    yield server
    await server.stop()


async def register(client: httpx.AsyncClient, keys: Keys, url: str) -> dict[str, Any]:
    response = await client.post("/v1/webhooks", json={"url": url}, headers=keys.a)
    assert response.status_code == 201, response.text
    return dict(response.json())


async def create_job(client: httpx.AsyncClient, keys: Keys, notify: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
    if notify is not None:
        body["notify"] = notify
    response = await client.post("/v1/jobs", json=body, headers=keys.a)
    assert response.status_code == 202, response.text
    return dict(response.json())


async def events_of(engine: AsyncEngine, job_id: str) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(webhook_deliveries.c.event)
            .where(webhook_deliveries.c.job_id == uuid.UUID(job_id))
            .order_by(webhook_deliveries.c.seq)
        )
        return [row.event for row in rows]


def sender(engine: AsyncEngine, clock: Clock, settings: Settings) -> WebhookSender:
    return WebhookSender(engine, clock, settings, status_document)


async def test_registration_shows_the_secret_once(client: httpx.AsyncClient, keys: Keys) -> None:
    made = await register(client, keys, "http://127.0.0.1:9/hook")
    assert made["secret"].startswith("whsec_")
    assert made["owner"] == "alice"
    read = await client.get(f"/v1/webhooks/{made['id']}", headers=keys.a)
    assert read.status_code == 200
    assert "secret" not in read.json()
    listed = (await client.get("/v1/webhooks", headers=keys.a)).json()["items"]
    assert [w["id"] for w in listed] == [made["id"]]
    assert "secret" not in listed[0]
    other = await client.get(f"/v1/webhooks/{made['id']}", headers=keys.b)
    assert other.status_code == 404
    assert other.json()["type"] == "urn:atlas-jobs:problem:webhook-not-found"
    assert (await client.delete(f"/v1/webhooks/{made['id']}", headers=keys.b)).status_code == 404
    assert (await client.delete(f"/v1/webhooks/{made['id']}", headers=keys.a)).status_code == 204


async def test_internal_addresses_are_refused_unless_configured(
    api_settings: Settings, keys: Keys, client: httpx.AsyncClient
) -> None:
    for url in ("http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/x", "gopher://x"):
        refused = await client.post("/v1/webhooks", json={"url": url}, headers=keys.a)
        assert refused.status_code == 422, url
        assert refused.json()["errors"][0]["loc"] == ["body", "url"]
    default = replace_settings(api_settings, webhook_internal_hosts="")
    application: FastAPI = create_app(default, clock=Clock())
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as plain:
            for url in ("http://127.0.0.1:8080/hook", "http://localhost/hook"):
                refused = await plain.post("/v1/webhooks", json={"url": url}, headers=keys.a)
                assert refused.status_code == 422, url


def replace_settings(settings: Settings, **changes: Any) -> Settings:
    return settings.model_copy(update=changes)


async def test_notify_must_name_one_of_the_owners_endpoints(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    alices = await register(client, keys, "http://127.0.0.1:9/hook")
    bobs = await client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/b"}, headers=keys.b)
    for notify in (bobs.json()["id"], str(uuid.uuid4())):
        refused = await client.post(
            "/v1/jobs",
            json={"kind": "atlas.bundle", "input": BUNDLE_INPUT, "notify": notify},
            headers=keys.a,
        )
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["loc"] == ["body", "notify"]
    batch = await client.post(
        "/v1/jobs:batch",
        json={
            "jobs": [
                {"kind": "atlas.noop", "input": {}, "notify": alices["id"]},
                {"kind": "atlas.noop", "input": {}, "notify": bobs.json()["id"]},
            ]
        },
        headers=keys.a,
    )
    assert batch.status_code == 422
    assert batch.json()["errors"][0]["loc"] == ["body", "jobs", "1", "notify"]
    assert (await client.get("/v1/jobs", headers=keys.a)).json()["items"] == []


async def test_each_terminal_event_and_the_expiry_enqueue_one_delivery_with_the_move(
    client: httpx.AsyncClient, keys: Keys, driver: Driver, engine: AsyncEngine
) -> None:
    hook = await register(client, keys, "http://127.0.0.1:9/hook")
    succeeded = await create_job(client, keys, hook["id"])
    failed = await create_job(client, keys, hook["id"])
    unresolved = await create_job(client, keys, hook["id"])
    canceled = await create_job(client, keys, hook["id"])
    silent = await create_job(client, keys, None)
    await driver.succeed(uuid.UUID(succeeded["id"]), "alice", FILES)
    await driver.fail(uuid.UUID(failed["id"]))
    await driver.unresolve(uuid.UUID(unresolved["id"]))
    cancel = await client.post(f"/v1/jobs/{canceled['id']}/cancel", headers=keys.a)
    assert cancel.status_code == 202
    await driver.succeed(uuid.UUID(silent["id"]), "alice", FILES)
    await driver.expire(uuid.UUID(succeeded["id"]), "alice")
    assert await events_of(engine, succeeded["id"]) == ["job.succeeded", "job.result_expired"]
    assert await events_of(engine, failed["id"]) == ["job.failed"]
    assert await events_of(engine, unresolved["id"]) == ["job.unresolved"]
    assert await events_of(engine, canceled["id"]) == ["job.canceled"]
    assert await events_of(engine, silent["id"]) == []


async def test_deliveries_are_signed_status_bodies_and_a_lost_answer_is_resent_with_the_same_id(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    clock: Clock,
    api_settings: Settings,
    receiver: Receiver,
) -> None:
    receiver.drop_first_of_each = True
    hook = await register(client, keys, receiver.url)
    job = await create_job(client, keys, hook["id"])
    await driver.succeed(uuid.UUID(job["id"]), "alice", FILES)
    send = sender(engine, clock, api_settings)
    assert await send.run_once() == 0  # applied, answer lost: not delivered yet
    clock.advance(1)
    assert await send.run_once() == 1
    assert len(receiver.received) == 2
    assert receiver.ids()[0] == receiver.ids()[1]  # the same webhook-id on the retry
    for received in receiver.received:
        body = Webhook(hook["secret"]).verify(received.body, received.headers)
        assert body["id"] == job["id"]
        assert body["state"] == "succeeded"
    status = (await client.get(f"/v1/jobs/{job['id']}", headers=keys.a)).json()
    assert json.loads(receiver.received[-1].body) == status
    page = (await client.get(f"/v1/jobs/{job['id']}/notifications", headers=keys.a)).json()
    [delivery] = page["items"]
    assert delivery["id"] == receiver.ids()[0]
    assert delivery["state"] == "delivered"
    assert delivery["attempts"] == 2
    assert delivery["last_error"] is None
    clock.advance(5)
    assert await send.run_once() == 0  # nothing is sent again once delivered
    assert len(receiver.received) == 2


async def test_a_receiver_down_past_the_budget_gives_a_failed_delivery_and_an_untouched_job(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    clock: Clock,
    api_settings: Settings,
    receiver: Receiver,
) -> None:
    await receiver.stop()  # nothing listens on its port any more
    hook = await register(client, keys, receiver.url)
    job = await create_job(client, keys, hook["id"])
    await driver.fail(uuid.UUID(job["id"]))
    send = sender(engine, clock, api_settings)
    for _ in range(api_settings.webhook_max_attempts + 2):
        await send.run_once()
        clock.advance(1)
    page = (await client.get(f"/v1/jobs/{job['id']}/notifications", headers=keys.a)).json()
    [delivery] = page["items"]
    assert delivery["state"] == "failed"
    assert delivery["attempts"] == api_settings.webhook_max_attempts
    assert delivery["last_error"] == "ConnectError"
    assert delivery["event"] == "job.failed"
    status = (await client.get(f"/v1/jobs/{job['id']}", headers=keys.a)).json()
    assert status["state"] == "failed"
    other = await client.get(f"/v1/jobs/{job['id']}/notifications", headers=keys.b)
    assert other.status_code == 404


async def test_an_error_status_is_retried_then_failed_with_the_code(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    clock: Clock,
    api_settings: Settings,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    receiver.status = 503
    hook = await register(client, keys, receiver.url)
    job = await create_job(client, keys, hook["id"])
    await driver.unresolve(uuid.UUID(job["id"]))
    send = sender(engine, clock, api_settings)
    for _ in range(api_settings.webhook_max_attempts):
        await send.run_once()
        clock.advance(1)
    [delivery] = (await client.get(f"/v1/jobs/{job['id']}/notifications", headers=keys.a)).json()[
        "items"
    ]
    assert delivery["state"] == "failed"
    assert delivery["last_status_code"] == 503
    assert delivery["last_error"] == "http_503"
    assert len(receiver.received) == api_settings.webhook_max_attempts
    assert len(set(receiver.ids())) == 1


PROBE_URLS = [
    "http://[::7f00:1]/",
    "http://[::127.0.0.1]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]/",
    "http://[::ffff:0:7f00:1]/",
]
"""IPv6 forms of internal IPv4 addresses that ``ipaddress.is_global`` calls global."""


def fixed_resolver(*addresses: str) -> tuple[list[str], Resolver]:
    """A resolver answering ``addresses`` for any name, and the names it was asked."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        asked.append(host)
        return list(addresses)

    return asked, resolve


async def test_ipv6_forms_of_internal_addresses_are_refused_at_registration(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    for url in PROBE_URLS:
        refused = await client.post("/v1/webhooks", json={"url": url}, headers=keys.a)
        assert refused.status_code == 422, url
        problem = refused.json()
        assert problem["type"] == "urn:atlas-jobs:problem:invalid-request"
        assert problem["errors"][0]["loc"] == ["body", "url"]
        assert problem["errors"][0]["type"] == "unsafe_url"
    # a name that resolves to public addresses and ONE internal one is refused too
    asked, app.state.atlas.resolve = fixed_resolver("93.184.216.34", "::ffff:0:a9fe:a9fe")
    mixed = await client.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/x"}, headers=keys.a
    )
    assert mixed.status_code == 422
    assert mixed.json()["errors"][0]["loc"] == ["body", "url"]
    assert asked == ["hooks.example.com"]
    asked, app.state.atlas.resolve = fixed_resolver("93.184.216.34")
    public = await client.post(
        "/v1/webhooks", json={"url": "https://hooks.example.com/x"}, headers=keys.a
    )
    assert public.status_code == 201, public.text
    assert (await client.get("/v1/webhooks", headers=keys.a)).json()["items"][0]["url"] == (
        "https://hooks.example.com/x"
    )


async def test_ipv6_forms_of_internal_addresses_are_refused_at_delivery(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    clock: Clock,
    api_settings: Settings,
) -> None:
    """Endpoints stored before the guard knew these forms (or rebound since) fail their
    deliveries as ``unsafe_url``, without a connection."""
    hooks = []
    async with engine.begin() as conn:
        for url in [*PROBE_URLS, "http://rebound.example/"]:
            row = await store.register(
                conn, owner="alice", url=url, secret=new_secret(), description=None, created_by="t"
            )
            hooks.append(str(row.id))
    jobs = [await create_job(client, keys, hook) for hook in hooks]
    for job in jobs:
        await driver.fail(uuid.UUID(job["id"]))
    asked, resolve = fixed_resolver("93.184.216.34", "64:ff9b::7f00:1")  # public + NAT64 loopback
    send = WebhookSender(engine, clock, api_settings, status_document, resolve=resolve)
    assert await send.run_once() == 0
    assert asked == ["rebound.example"]
    for job in jobs:
        page = (await client.get(f"/v1/jobs/{job['id']}/notifications", headers=keys.a)).json()
        [delivery] = page["items"]
        assert (delivery["state"], delivery["last_error"]) == ("failed", "unsafe_url")
        assert delivery["attempts"] == 1


async def test_a_delivery_connects_to_the_address_its_check_resolved(
    api_settings: Settings,
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    clock: Clock,
    receiver: Receiver,
) -> None:
    """DNS rebinding: the name is resolved once per pass, by the check, and the
    connection goes to that address -- a second answer (here, any answer after the
    first) is never asked for. ``hooks.test`` resolves nowhere but in the test's
    resolver, so only the pinned address can have reached the receiver."""
    settings = replace_settings(api_settings, webhook_internal_hosts="hooks.test")
    url = f"http://hooks.test:{receiver.port}/hooks/atlas"
    async with engine.begin() as conn:
        row = await store.register(
            conn, owner="alice", url=url, secret=new_secret(), description=None, created_by="t"
        )
    jobs = [await create_job(client, keys, str(row.id)) for _ in range(3)]
    for job in jobs:
        await driver.fail(uuid.UUID(job["id"]))
    answers = iter([["127.0.0.1"]])
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> Sequence[str]:
        asked.append(f"{host}:{port}")
        return next(answers, ["10.0.0.1"])  # a second answer would point elsewhere

    send = WebhookSender(engine, clock, settings, status_document, resolve=rebinding)
    assert await send.run_once() == 3
    assert asked == [f"hooks.test:{receiver.port}"]  # once for the three deliveries
    assert len(receiver.received) == 3
    assert {r.headers["host"] for r in receiver.received} == {f"hooks.test:{receiver.port}"}
    for received in receiver.received:  # signing is unchanged
        Webhook(row.secret).verify(received.body, received.headers)


async def test_the_pinned_transport_never_resolves_a_host_it_was_not_given(
    receiver: Receiver,
) -> None:
    transport = PinnedTransport()
    transport.pin(Target(receiver.url, "hooks.test", receiver.port, ("127.0.0.1",)))
    async with httpx.AsyncClient(transport=transport) as http:
        pinned = await http.post(f"http://hooks.test:{receiver.port}/x", content=b"{}")
        assert pinned.status_code == 200
        with pytest.raises(httpx.ConnectError, match="not checked"):
            await http.post(f"http://localhost:{receiver.port}/x", content=b"{}")
    assert len(receiver.received) == 1
