"""Creation's optional fields (request id, idempotency key, replay, trigger, trace
context): a field no job of a batch carries is sent as ONE NULL instead of an array of
NULLs (``_jobs_as_arrays``, the batch shape), and every job still gets exactly its own
values, in its row and in its ``create`` history row, whether a batch carries none, some
or all of them."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.schema import job_history, jobs
from atlas_jobs._app.ids import new_id
from atlas_jobs._app.transitions import Actor, NewJob, Transitions
from atlas_jobs._app.transitions.requests import _jobs_as_arrays

CLIENT = Actor("client", "alice")
PLAIN = NewJob(
    owner="alice",
    kind="test.fields",
    kind_version=1,
    input={"n": 1},
    max_attempts=3,
    max_elapsed_seconds=3600,
)


async def _stored(engine: AsyncEngine, ids: list[uuid.UUID]) -> list[tuple[object, ...]]:
    async with engine.connect() as conn:
        rows = {
            r.id: r
            for r in await conn.execute(
                select(
                    jobs.c.id, jobs.c.request_id, jobs.c.idempotency_key, jobs.c.replay_of
                ).where(jobs.c.id.in_(ids))
            )
        }
        history = {
            h.job_id: h
            for h in await conn.execute(
                select(job_history.c.job_id, job_history.c.event_id, job_history.c.data).where(
                    job_history.c.job_id.in_(ids), job_history.c.transition == "create"
                )
            )
        }
    return [
        (
            rows[i].request_id,
            rows[i].idempotency_key,
            rows[i].replay_of,
            history[i].event_id,
            history[i].data,
        )
        for i in ids
    ]


def test_an_optional_field_no_job_carries_is_one_null() -> None:
    batch = [PLAIN, PLAIN._replace(request_id="req-1"), PLAIN]
    params = _jobs_as_arrays([new_id() for _ in batch], batch)
    assert list(params["p_request_id"]) == [None, "req-1", None]
    assert params["p_idempotency_key"] is None
    assert params["p_replay_of"] is None
    assert params["p_data"] is None
    assert len(params["p_owner"]) == len(json.loads(params["p_input"])) == 3


async def test_each_job_keeps_its_own_optional_fields(
    engine: AsyncEngine, transitions: Transitions
) -> None:
    async with engine.begin() as conn:
        [old] = await transitions.create_many(conn, [PLAIN], actor=CLIENT)
        batch = [
            PLAIN,
            PLAIN._replace(request_id="req-2", idempotency_key="key-2"),
            PLAIN._replace(replay_of=old.job.id),
            PLAIN._replace(
                trigger={"schedule_id": "s-1"},
                traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
            ),
        ]
        mixed = await transitions.create_many(conn, batch, actor=CLIENT)
        none = await transitions.create_many(conn, [PLAIN, PLAIN], actor=CLIENT)
    old_id = old.job.id
    assert await _stored(engine, [a.job.id for a in mixed]) == [
        (None, None, None, None, None),
        ("req-2", "key-2", None, "req-2", {"idempotency_key": "key-2"}),
        (None, None, old_id, None, {"replay_of": str(old_id)}),
        (
            None,
            None,
            None,
            None,
            {"schedule_id": "s-1", "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
        ),
    ]
    assert [a.job.replay_of for a in mixed] == [None, None, old_id, None]  # in the status
    assert await _stored(engine, [a.job.id for a in none]) == [(None,) * 5] * 2
