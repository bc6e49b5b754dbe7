"""Round trips per request, counted at the driver (SQLAlchemy cursor events, and the
driver's query logger for what is sent past SQLAlchemy).

Every statement is a round trip to PostgreSQL; so is every pool checkout (the
pre-ping: one ``;``, see ``tests/integration/test_engine_ping.py``) and every
BEGIN/COMMIT/ROLLBACK, which the driver's query logger sees (``Trips.control``), as it
sees the statements sent straight to the driver (``atlas_jobs._app.db.driver``). These
tests pin the counts of the hottest routes so a change that adds a round trip shows up
here, not only in a benchmark.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import event

from tests.api.support import BUNDLE_INPUT, Driver, Keys

DRIVER_INTROSPECTION = (
    "WITH RECURSIVE typeinfo_tree",
    "SELECT current_setting('jit')",
    "SELECT set_config('jit'",
)
"""What asyncpg sends once per connection, the first time a statement binds a type it
has not met there (an array of ``jsonb``): its type lookup, with JIT off around it."""


@dataclass
class Trips:
    statements: list[str] = field(default_factory=list)
    checkouts: int = 0
    control: list[str] = field(default_factory=list)
    """Simple queries after checkout: transaction control (BEGIN, COMMIT, ROLLBACK)."""


@contextmanager
def counting(app: FastAPI) -> Iterator[Trips]:
    engine = app.state.atlas.engine.sync_engine
    trips = Trips()

    def background() -> bool:
        # The API's metrics sampler and its live-workers view (workers, lanes, keys) query
        # on their own cadence; on a busy machine a read can land inside the request
        # being counted.
        task = asyncio.current_task()
        return task is not None and task.get_name() in {"metrics-sampler", "live-workers"}

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if not background():
            trips.statements.append(" ".join(statement.split())[:80])

    def on_query(record: Any) -> None:
        # asyncpg calls loggers with call_soon: await asyncio.sleep(0) before reading.
        # It logs what is sent outside SQLAlchemy's prepared executions: transaction
        # control, and the statements sent straight to the driver (a creation or a
        # batched move on an autocommit connection: atlas_jobs._app.db.driver).
        query = " ".join(record.query.split())
        if not query.strip(";"):
            return  # the checkout's pre-ping, counted as the checkout
        if query.startswith(DRIVER_INTROSPECTION):
            return  # the driver's first use of a type on this connection, not per request
        word = query.split()[0].rstrip(";").upper()
        if word in {"BEGIN", "COMMIT", "ROLLBACK"}:
            trips.control.append(word)
        else:
            trips.statements.append(query[:80])

    logged: list[Any] = []

    def on_checkout(dbapi_connection: Any, *_args: Any) -> None:
        if background():
            return
        trips.checkouts += 1
        driver = dbapi_connection.driver_connection
        if driver not in logged:
            driver.add_query_logger(on_query)
            logged.append(driver)

    event.listen(engine, "before_cursor_execute", on_execute)
    event.listen(engine.pool, "checkout", on_checkout)
    try:
        yield trips
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)
        event.remove(engine.pool, "checkout", on_checkout)
        for driver in logged:
            driver.remove_query_logger(on_query)


BODY = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}


async def test_create_is_one_statement_in_its_own_transaction(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """Authenticate (only the key's first request: the lookup is cached, see
    ``tests/api/test_key_cache.py``); then ONE statement applies the admission rule
    (``atlas_admission_count``: the owner's lock, then the count under it), writes the
    job and its history row, and returns the row the 202 is answered from -- as its own
    transaction, so no BEGIN/COMMIT round trips either. Before the single executor: 6
    statements on 3 connections; before the key cache and the admitted creation: 4
    statements, BEGIN and COMMIT on 2 connections for every create."""
    with counting(app) as trips:
        created = await client.post("/v1/jobs", json=BODY, headers=keys.a)
        await asyncio.sleep(0)  # the driver's query loggers run on the next loop turn
    assert created.status_code == 202, created.text
    assert len(trips.statements) == 2, trips.statements
    assert trips.statements[0].startswith("SELECT api_keys.id"), trips.statements
    assert trips.statements[1].startswith("WITH admission AS"), trips.statements
    assert trips.checkouts == 2
    assert trips.control == []

    with counting(app) as trips:
        again = await client.post("/v1/jobs", json=BODY, headers=keys.a)
        await asyncio.sleep(0)
    assert again.status_code == 202, again.text
    assert len(trips.statements) == 1, trips.statements
    assert trips.checkouts == 1
    assert trips.control == []


async def test_a_status_read_is_one_statement_without_transaction_round_trips(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """The job row, ONE statement on an autocommit checkout (the key was looked up by
    the create before it and is cached): no BEGIN/ROLLBACK. Before: authentication and
    the job row plus two BEGIN, two ROLLBACK and a three-round-trip pre-ping per
    checkout (12 round trips, then 4, now 2: the checkout's ping and the statement)."""
    created = (await client.post("/v1/jobs", json=BODY, headers=keys.a)).json()
    with counting(app) as trips:
        read = await client.get(f"/v1/jobs/{created['id']}", headers=keys.a)
        await asyncio.sleep(0)
    assert read.status_code == 200, read.text
    assert len(trips.statements) == 1, trips.statements
    assert trips.checkouts == 1
    assert trips.control == []


async def test_create_with_idempotency_key_is_one_statement(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """The key's in-flight lock, admission, the key row, the job and its history row in
    ONE statement, its own transaction (no BEGIN/COMMIT); a replay is that statement
    (which finds the key stored and creates nothing) plus the read of the key's job.
    Before: 9 statements, and 6 for a replay, on 3 connections; then 7 and 3 on 2; then
    4 + BEGIN/COMMIT and 2 + BEGIN/COMMIT on 1."""
    headers = {**keys.a, "Idempotency-Key": "trips-1"}
    with counting(app) as trips:
        created = await client.post("/v1/jobs", json=BODY, headers=headers)
        await asyncio.sleep(0)
    assert created.status_code == 202, created.text
    assert len(trips.statements) == 2, trips.statements  # the first: with authentication
    assert trips.statements[1].startswith("WITH guard AS"), trips.statements
    assert trips.checkouts == 2
    assert trips.control == []
    with counting(app) as trips:
        again = await client.post(
            "/v1/jobs", json=BODY, headers={**headers, "Idempotency-Key": "trips-2"}
        )
        await asyncio.sleep(0)
    assert again.status_code == 202, again.text
    assert len(trips.statements) == 1, trips.statements
    assert trips.checkouts == 1
    assert trips.control == []
    with counting(app) as trips:
        replayed = await client.post("/v1/jobs", json=BODY, headers=headers)
        await asyncio.sleep(0)
    assert replayed.status_code == 202
    assert replayed.headers["Idempotency-Replayed"] == "true"
    assert replayed.json()["id"] == created.json()["id"]
    assert len(trips.statements) == 2, trips.statements  # the keyed creation, the key's read
    assert trips.checkouts == 1
    assert trips.control == []


async def test_cancel_is_one_statement_after_auth(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    """The cancel statement moves the job, writes its history and returns the row the
    202 shows (the key is cached by then). Before: 6 statements on 3 connections, then 2
    on 2."""
    running = (await client.post("/v1/jobs", json=BODY, headers=keys.a)).json()
    await driver.claim(uuid.UUID(running["id"]))
    queued = (await client.post("/v1/jobs", json=BODY, headers=keys.a)).json()
    for job, state in ((queued, "canceled"), (running, "cancel_requested")):
        with counting(app) as trips:
            canceled = await client.post(f"/v1/jobs/{job['id']}/cancel", headers=keys.a)
        assert canceled.status_code == 202, canceled.text
        assert canceled.json()["state"] == state
        assert len(trips.statements) == 1, trips.statements
        assert trips.checkouts == 1


async def test_a_batch_picks_its_transaction_by_what_it_writes(
    app: FastAPI, client: httpx.AsyncClient, keys: Keys
) -> None:
    """A batch without keys or ``notify`` is ONE creation statement, its own
    transaction (no BEGIN/COMMIT), like a single job; a batch with keys takes their
    locks, so it runs in one transaction: BEGIN, then COMMIT after its key rows."""
    await client.post("/v1/jobs", json=BODY, headers=keys.a)  # the key lookup cached
    with counting(app) as trips:
        created = await client.post(
            "/v1/jobs:batch", json={"jobs": [BODY, BODY, BODY]}, headers=keys.a
        )
        await asyncio.sleep(0)
    assert created.status_code == 202, created.text
    assert len(created.json()["items"]) == 3
    assert len(trips.statements) == 1, trips.statements
    assert trips.statements[0].startswith("WITH admission AS"), trips.statements
    assert trips.control == []

    keyed = [{**BODY, "idempotency_key": f"batch-{uuid.uuid4()}-{i}"} for i in range(2)]
    with counting(app) as trips:
        created = await client.post("/v1/jobs:batch", json={"jobs": keyed}, headers=keys.a)
        await asyncio.sleep(0)
    assert created.status_code == 202, created.text
    assert trips.control == ["BEGIN", "COMMIT"], trips.control
