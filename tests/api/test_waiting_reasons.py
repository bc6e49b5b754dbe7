"""``waiting_for`` on a queued job that a live worker serves: its concurrency key at the
limit, other owners' turn first (fair share) or older jobs first (backlog) -- read from
the API's view of the claim's lanes and keys, with the labels people read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import workers
from atlas_jobs._app.kinds import handler_key
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from tests.api.support import Keys
from tests.api.test_kinds import api_settings, app, eventually  # noqa: F401

NOOP = handler_key("atlas.noop", 1)


def noop(owner: str, key: str | None = None) -> NewJob:
    return NewJob(
        owner=owner,
        kind="atlas.noop",
        kind_version=1,
        input={},
        max_attempts=3,
        max_elapsed_seconds=600,
        concurrency_key=key,
        concurrency_limit=None if key is None else 1,
    )


async def register(engine: AsyncEngine, clock: Clock) -> None:
    """A live worker process serving ``atlas.noop@1``, at the test's clock."""
    async with engine.begin() as conn:
        await workers.beat(
            conn,
            clock,
            worker_id="w-live",
            host="elsewhere",
            pid=4242,
            serves=[NOOP],
            concurrency=2,
        )


async def created(engine: AsyncEngine, transitions: Transitions, new: NewJob) -> str:
    async with engine.begin() as conn:
        job = await transitions.create(conn, new, actor=Actor("client", new.owner))
    return str(job.job.id)


async def status_of(
    client: httpx.AsyncClient, keys: Keys, job_id: str, reason: str
) -> httpx.Response:
    async def read() -> httpx.Response:
        return await client.get(f"/v1/jobs/{job_id}", headers=keys.a)

    def says(answer: httpx.Response) -> bool:
        waiting: Any = answer.json()["waiting_for"]
        return waiting is not None and waiting["reason"] == reason

    try:
        return await eventually(read, says, f"waiting_for {reason}")
    except AssertionError:
        body = (await read()).json()
        raise AssertionError(
            f"waiting_for never said {reason}: {body.get('state')}, {body.get('waiting_for')}"
        ) from None


async def test_a_job_whose_key_is_at_its_limit_waits_for_a_slot(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    await register(engine, clock)
    await created(engine, transitions, noop("alice", "press"))
    held = await created(engine, transitions, noop("alice", "press"))
    async with engine.begin() as conn:
        [running] = await transitions.claim(conn, worker_id="w", handlers=[NOOP], limit=5)
    assert str(running.id) != held
    answer = await status_of(client, keys, held, "concurrency")
    held_by = {k: v for k, v in answer.json()["waiting_for"].items() if v is not None}
    assert held_by == {
        "reason": "concurrency",
        "key": "press",
        "limit": 1,
        "running": 1,
        "message": "waiting for a slot in press (1 of 1 busy)",
    }
    assert answer.headers["etag"] == 'W/"1-concurrency"'
    assert present(answer.json(), Observation.FRESH).label == (
        "Queued — waiting for a slot in press (1 of 1 busy)"
    )


async def test_a_job_whose_key_has_no_start_left_waits_for_its_start_rate(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    await register(engine, clock)
    paced = noop("alice", "api")._replace(concurrency_limit=None)
    paced = paced._replace(concurrency_rate=1, concurrency_period_seconds=3600.0)
    await created(engine, transitions, paced)
    held = await created(engine, transitions, paced)
    async with engine.begin() as conn:
        [started] = await transitions.claim(conn, worker_id="w", handlers=[NOOP], limit=5)
    assert str(started.id) != held
    answer = await status_of(client, keys, held, "rate")
    waiting = answer.json()["waiting_for"]
    held_by = {k: v for k, v in waiting.items() if v is not None and k != "next_start_at"}
    assert held_by == {
        "reason": "rate",
        "key": "api",
        "starts": 1,
        "per_seconds": 3600.0,
        "message": "waiting for a start in api (1 per 3600 s)",
    }
    # The one token refills an hour after the start spent it.
    next_start = datetime.fromisoformat(waiting["next_start_at"])
    assert timedelta(minutes=59) < next_start - datetime.now(UTC) <= timedelta(hours=1)
    assert answer.headers["etag"] == 'W/"1-rate"'
    assert present(answer.json(), Observation.FRESH).label == (
        "Queued — waiting for a start in api (1 per 3600 s)"
    )


async def test_behind_a_queue_a_job_says_whose_turn_comes_first(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    await register(engine, clock)
    first = await created(engine, transitions, noop("alice"))
    later = await created(engine, transitions, noop("alice"))
    async with engine.begin() as conn:
        await transitions.create(conn, noop("bob"), actor=Actor("client", "bob"))
    # The queue is not behind (yet). Until the API's view of live workers has seen the
    # worker registered above, the job reads no_worker: wait for that view, not longer.
    quiet = await eventually(
        lambda: client.get(f"/v1/jobs/{later}", headers=keys.a),
        lambda answer: answer.json()["waiting_for"] is None,
        "waiting_for null once the API sees the live worker",
    )
    assert quiet.json()["waiting_for"] is None

    clock.advance(60)  # the oldest job has now waited a minute
    await register(engine, clock)  # still live at the moved clock
    # bob's lane came last, so it is one turn ahead of alice's (a new lane goes first).
    behind = await status_of(client, keys, later, "fair_share")
    waiting = behind.json()["waiting_for"]
    assert {k: waiting[k] for k in ("ahead_of_you", "estimate")} == {
        "ahead_of_you": 1,
        "estimate": True,
    }
    assert waiting["queue_age_seconds"] >= 60
    assert present(behind.json(), Observation.FRESH).label == (
        "Queued — other owners' turn first (about 1 ahead)"
    )
    async with engine.begin() as conn:  # bob's turn: his job starts, alice's lane is next
        [started] = await transitions.claim(conn, worker_id="w", handlers=[NOOP], limit=1)
    assert started.owner == "bob"
    backlog = await status_of(client, keys, first, "backlog")
    assert backlog.json()["waiting_for"]["estimate"] is True
    assert present(backlog.json(), Observation.FRESH).label.startswith(
        "Queued — behind older jobs (the oldest has waited"
    )
