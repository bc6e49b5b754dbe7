"""Round trips per request, counted at the driver (SQLAlchemy cursor events).

Every statement is a round trip to PostgreSQL; so is every pool checkout (the
pre-ping) and every BEGIN/COMMIT. These tests pin the counts of the hottest routes so
a change that adds a round trip shows up here, not only in a benchmark.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import event

from tests.api.support import BUNDLE_INPUT, Driver, Keys


@dataclass
class Trips:
    statements: list[str] = field(default_factory=list)
    checkouts: int = 0


@contextmanager
def counting(app: FastAPI) -> Iterator[Trips]:
    engine = app.state.atlas.engine.sync_engine
    trips = Trips()

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        trips.statements.append(" ".join(statement.split())[:80])

    def on_checkout(*_args: Any) -> None:
        trips.checkouts += 1

    event.listen(engine, "before_cursor_execute", on_execute)
    event.listen(engine.pool, "checkout", on_checkout)
    try:
        yield trips
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine.pool, "checkout", on_checkout)


BODY = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def test_create_is_one_statement_after_auth_and_admission(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """Authenticate; admission (the owner's lock, then the count under it -- two
    statements, or the count could miss a concurrent creation); then ONE statement
    writes the job and its history row, and the 202 is answered from its RETURNING row.
    Before the single executor: 6 statements on 3 connections."""
    with counting(app) as trips:
        created = await client.post("/v1/jobs", json=BODY, headers=keys.a)
    assert created.status_code == 202, created.text
    assert len(trips.statements) == 4, trips.statements
    assert trips.statements[-1].startswith("WITH input AS"), trips.statements
    assert trips.checkouts == 2


async def test_create_with_idempotency_key(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """Plus the in-flight lock, the key lookup (with its job) and the key row.
    Before: 9 statements, and 6 for a replay, on 3 connections."""
    headers = {**keys.a, "Idempotency-Key": "trips-1"}
    with counting(app) as trips:
        created = await client.post("/v1/jobs", json=BODY, headers=headers)
    assert created.status_code == 202, created.text
    assert len(trips.statements) == 7, trips.statements
    assert trips.checkouts == 2
    with counting(app) as trips:
        replayed = await client.post("/v1/jobs", json=BODY, headers=headers)
    assert replayed.status_code == 202
    assert replayed.headers["Idempotency-Replayed"] == "true"
    assert replayed.json()["id"] == created.json()["id"]
    assert len(trips.statements) == 3, trips.statements
    assert trips.checkouts == 2


async def test_cancel_is_one_statement_after_auth(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    """The cancel statement moves the job, writes its history and returns the row the
    202 shows. Before: 6 statements on 3 connections."""
    running = (await client.post("/v1/jobs", json=BODY, headers=keys.a)).json()
    await driver.claim(uuid.UUID(running["id"]))
    queued = (await client.post("/v1/jobs", json=BODY, headers=keys.a)).json()
    for job, state in ((queued, "canceled"), (running, "cancel_requested")):
        with counting(app) as trips:
            canceled = await client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.a)
        assert canceled.status_code == 202, canceled.text
        assert canceled.json()["state"] == state
        assert len(trips.statements) == 2, trips.statements
        assert trips.checkouts == 2
