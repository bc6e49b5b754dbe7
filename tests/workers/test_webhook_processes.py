"""Webhooks sent by real worker processes: every job's terminal event reaches the
receiver under one ``webhook-id`` although the first answer of each is lost, signed
with the endpoint's secret; the job's state never depends on the delivery."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from atlas_jobs._app.db import webhooks as store
from atlas_jobs._app.db.schema import webhook_deliveries
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from atlas_jobs._app.webhooks import new_secret
from tests.webhook_receiver import Receiver
from tests.workers.conftest import MakeFleet
from tests.workers.dbwait import eventually, wait_all_terminal

JOBS = 12


async def test_each_terminal_event_arrives_once_per_webhook_id_through_lost_answers(
    engine: AsyncEngine, transitions: Transitions, make_fleet: MakeFleet
) -> None:
    receiver = Receiver(drop_first_of_each=True)
    await receiver.start()
    try:
        secret = new_secret()
        async with engine.begin() as conn:
            hook = await store.register(
                conn, owner="alice", url=receiver.url, secret=secret, description=None,
                created_by="client:alice",
            )  # fmt: skip
            created = await transitions.create_many(
                conn,
                [NewJob("alice", "atlas.noop", 1, {"tag": str(i)}, 3, 600) for i in range(JOBS)],
                actor=Actor("client", "alice"),
            )
            await store.attach(conn, [(c.job.id, hook.id) for c in created])
        fleet = make_fleet()
        fleet.extra_env = {
            "ATLAS_WEBHOOK_INTERNAL_HOSTS": "127.0.0.1",
            "ATLAS_WEBHOOK_INTERVAL_SECONDS": "0.2",
            "ATLAS_WEBHOOK_BACKOFF_BASE_SECONDS": "0.2",
            "ATLAS_WEBHOOK_BACKOFF_CAP_SECONDS": "0.5",
        }
        for name in ("hooks-a", "hooks-b"):
            fleet.start(name, concurrency=4)
        assert await wait_all_terminal(engine, timeout=60) == {"succeeded": JOBS}

        async def states() -> Counter[str]:
            async with engine.connect() as conn:
                rows = await conn.execute(select(webhook_deliveries.c.state))
                return Counter(row.state for row in rows)

        await eventually(
            states, lambda c: c == Counter({"delivered": JOBS}), timeout=60, what="delivered"
        )
        await asyncio.sleep(1)  # nothing more arrives once delivered
        per_id = Counter(receiver.ids())
        assert len(per_id) == JOBS, fleet.logs()
        assert set(per_id.values()) == {2}  # applied-then-dropped, then answered
        jobs_seen = set()
        for received in receiver.received:
            body = Webhook(secret).verify(received.body, received.headers)
            assert body["state"] == "succeeded"
            jobs_seen.add(uuid.UUID(body["id"]))
        assert jobs_seen == {c.job.id for c in created}
    finally:
        await receiver.stop()
