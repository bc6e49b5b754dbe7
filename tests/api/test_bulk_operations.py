"""Bulk operations over HTTP, run by the runner's ``run_once`` (the worker's part, in
process): the lifecycle of the resource, its counts and skip reasons, dry runs, the
history rows it leaves, roles and the kinds of a key's scope, cancel, a batch that fails,
``Prefer: wait`` and the event stream (mid-run over a live API process). Real worker
processes (a kill -9 halfway, two operations at once) are in
tests/workers/test_bulk_runner_processes.py."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.bulk_runner import BulkRunner
from tests.api.conftest import LiveApi
from tests.api.support import Driver, Keys, parse_sse, streamed_events

BUNDLE: dict[str, Any] = {
    "kind": "atlas.bundle",
    "input": {"preset": "coast", "pages": ["cover"], "format": "text-bundle-v1"},
}


def runner(engine: AsyncEngine, transitions: Transitions, batch_size: int = 2) -> BulkRunner:
    return BulkRunner(
        engine, transitions, worker_id="w-bulk-test", batch_size=batch_size, lease_seconds=30
    )


async def unresolved_jobs(
    client: httpx.AsyncClient, driver: Driver, auth: dict[str, str], n: int, tag: str
) -> list[str]:
    made = []
    for _ in range(n):
        job = (await client.post("/v1/jobs", json={**BUNDLE, "tags": [tag]}, headers=auth)).json()
        await driver.unresolve(uuid.UUID(job["id"]))
        made.append(job["id"])
    return made


async def start(client: httpx.AsyncClient, auth: dict[str, str], **body: Any) -> httpx.Response:
    return await client.post("/v1/bulk-operations", json=body, headers=auth)


async def test_a_bulk_resume_runs_in_batches_and_names_itself_in_each_history(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    stuck = await unresolved_jobs(client, driver, keys.a, 3, "dest=down")
    stuck += await unresolved_jobs(client, driver, keys.b, 2, "dest=down")
    ended = (
        await client.post("/v1/jobs", json={**BUNDLE, "tags": ["dest=down"]}, headers=keys.a)
    ).json()
    await driver.fail(uuid.UUID(ended["id"]))
    queued = (
        await client.post(
            "/v1/jobs",
            json={"kind": "atlas.noop", "input": {}, "tags": ["dest=down"]},
            headers=keys.a,
        )
    ).json()

    dry = await start(client, keys.op, action="resume", filter={"tag": ["dest=down"]}, dry_run=True)
    assert dry.status_code == 200, dry.text
    assert dry.json()["matched"] == 7
    assert dry.json()["matched_capped"] is False
    assert len(dry.json()["sample"]) == 7
    assert dry.json()["sample"][0]["id"] == queued["id"]  # newest first

    accepted = await start(
        client, keys.op, action="resume", filter={"tag": ["dest=down"]}, note="destination fixed"
    )
    assert accepted.status_code == 202, accepted.text
    op = accepted.json()
    assert accepted.headers["Location"] == op["links"]["self"] == f"/v1/bulk-operations/{op['id']}"
    assert op["state"] == "queued"
    assert op["requested_by"] == "operator:ops"
    assert op["links"]["jobs"] == "/v1/jobs?tag=dest%3Ddown"
    # a job created after the operation was accepted is not part of it
    later = await unresolved_jobs(client, driver, keys.a, 1, "dest=down")

    assert await runner(engine, transitions).run_once() == 4  # 7 jobs, 2 per batch
    done = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert done["state"] == "succeeded"
    assert done["counts"] == {
        "matched": 7,
        "done": 5,
        "skipped": 2,
        "skipped_by_reason": {"already_ended": 1, "not_allowed_in_state:queued": 1},
    }
    assert done["started_at"] is not None
    assert done["finished_at"] is not None
    assert done["links"]["cancel"] is None
    for job_id in stuck:
        status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.op)).json()
        assert status["state"] == "queued"
        assert status["reason"] == "resumed"
        history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.op)).json()
        [resumed] = [i for i in history["items"] if i["transition"] == "resume"]
        assert resumed["actor"] == "operator:ops"
        assert resumed["note"] == "destination fixed"
        assert resumed["data"] == {"bulk_operation": op["id"]}
    assert (await client.get(f"/v1/jobs/{later[0]}", headers=keys.op)).json()[
        "state"
    ] == "unresolved"
    assert await runner(engine, transitions).run_once() == 0  # nothing left to run


async def test_an_id_list_counts_missing_ids_and_cancels_what_it_may(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    stuck = await unresolved_jobs(client, driver, keys.a, 1, "t=1")
    queued = (
        await client.post("/v1/jobs", json={"kind": "atlas.noop", "input": {}}, headers=keys.b)
    ).json()
    canceled = (
        await client.post("/v1/jobs", json={"kind": "atlas.noop", "input": {}}, headers=keys.a)
    ).json()
    await client.post(f"/v1/jobs/{canceled['id']}/cancel", headers=keys.a)
    ghost = str(uuid.uuid4())
    op = (
        await start(
            client,
            keys.op,
            action="cancel",
            job_ids=[stuck[0], queued["id"], canceled["id"], ghost],
        )
    ).json()
    assert op["job_count"] == 4
    assert op["filter"] is None
    await runner(engine, transitions, batch_size=3).run_once()
    done = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert done["counts"]["done"] == 2
    assert done["counts"]["skipped_by_reason"] == {"already_ended": 1, "not_found": 1}
    assert (await client.get(f"/v1/jobs/{stuck[0]}", headers=keys.op)).json()["state"] == "canceled"
    assert (await client.get(f"/v1/jobs/{queued['id']}", headers=keys.op)).json()[
        "state"
    ] == "canceled"
    # the job that was already canceled got no new history row
    history = (await client.get(f"/v1/jobs/{canceled['id']}/history", headers=keys.a)).json()
    assert [i["transition"] for i in history["items"]] == ["create", "request_cancel"]


async def test_replay_and_fail_act_once_per_job(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    stuck = await unresolved_jobs(client, driver, keys.a, 2, "r=1")
    failed = await start(client, keys.op, action="fail", filter={"tag": ["r=1"]})
    await runner(engine, transitions).run_once()
    assert (await client.get(failed.json()["links"]["self"], headers=keys.op)).json()["counts"][
        "done"
    ] == 2
    for job_id in stuck:
        job = (await client.get(f"/v1/jobs/{job_id}", headers=keys.op)).json()
        assert job["state"] == "failed"
        assert job["error"]["code"] == "operator_failed"

    first = (await start(client, keys.op, action="replay", filter={"tag": ["r=1"]})).json()
    await runner(engine, transitions).run_once()
    second = (await start(client, keys.op, action="replay", job_ids=stuck)).json()
    await runner(engine, transitions).run_once()
    one = (await client.get(first["links"]["self"], headers=keys.op)).json()["counts"]
    two = (await client.get(second["links"]["self"], headers=keys.op)).json()["counts"]
    assert one["done"] == 2
    assert one["skipped"] == 0
    assert two["done"] == 0
    assert two["skipped_by_reason"] == {"already_replayed": 2}
    replays = (
        await client.get("/v1/jobs", params={"tag": "r=1", "state": "queued"}, headers=keys.op)
    ).json()
    assert sorted(j["replay_of"] for j in replays["items"]) == sorted(stuck)
    [new] = [j for j in replays["items"] if j["replay_of"] == stuck[0]]
    [created] = (await client.get(f"/v1/jobs/{new['id']}/history", headers=keys.op)).json()["items"]
    assert created["transition"] == "replay"
    assert created["actor"] == "operator:ops"
    assert created["data"]["bulk_operation"] == first["id"]


async def test_a_filter_matching_nothing_succeeds_with_zero(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    op = (await start(client, keys.op, action="resume", filter={"tag": ["no=such"]})).json()
    await runner(engine, transitions).run_once()
    done = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert done["state"] == "succeeded"
    assert done["counts"] == {"matched": 0, "done": 0, "skipped": 0, "skipped_by_reason": {}}


async def test_jobs_of_kinds_outside_the_keys_scope_are_skipped_untouched(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    stuck = await unresolved_jobs(client, driver, keys.a, 1, "s=1")
    queued = (
        await client.post(
            "/v1/jobs", json={"kind": "atlas.noop", "input": {}, "tags": ["s=1"]}, headers=keys.a
        )
    ).json()
    async with engine.begin() as conn:
        scoped = await create_key(conn, owner="ops2", roles=[Role.OPERATOR], kinds=["atlas.noop"])
    op = (await start(client, Keys.header(scoped), action="cancel", filter={"tag": ["s=1"]})).json()
    assert op["kinds"] == ["atlas.noop"]
    await runner(engine, transitions).run_once()
    done = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert done["counts"]["done"] == 1
    assert done["counts"]["skipped_by_reason"] == {"outside_scope": 1}
    assert (await client.get(f"/v1/jobs/{queued['id']}", headers=keys.a)).json()[
        "state"
    ] == "canceled"
    assert (await client.get(f"/v1/jobs/{stuck[0]}", headers=keys.a)).json()[
        "state"
    ] == "unresolved"
    history = (await client.get(f"/v1/jobs/{stuck[0]}/history", headers=keys.a)).json()
    assert "operator_cancel" not in [i["transition"] for i in history["items"]]


async def test_only_operators_and_bad_bodies_are_422(client: httpx.AsyncClient, keys: Keys) -> None:
    for auth in (keys.rev, keys.a):
        refused = await start(client, auth, action="cancel", filter={})
        assert refused.status_code == 403
        assert (await client.get("/v1/bulk-operations", headers=auth)).status_code == 403
    for body, loc in (
        ({"action": "delete", "filter": {}}, ["body", "action"]),
        ({"action": "cancel"}, ["body"]),
        ({"action": "cancel", "filter": {}, "job_ids": [str(uuid.uuid4())]}, ["body"]),
        ({"action": "cancel", "filter": {"colour": "blue"}}, ["body", "filter", "colour"]),
        (
            {
                "action": "cancel",
                "filter": {
                    "created_after": "2026-12-02T00:00:00Z",
                    "created_before": "2026-12-01T00:00:00Z",
                },
            },
            ["body", "filter", "created_before"],
        ),
        ({"action": "cancel", "job_ids": ["not-a-uuid"]}, ["body", "job_ids", "0"]),
    ):
        response = await client.post("/v1/bulk-operations", json=body, headers=keys.op)
        assert response.status_code == 422, (body, response.text)
        assert any(e["loc"][: len(loc)] == loc for e in response.json()["errors"]), response.text
    missing = await client.get(f"/v1/bulk-operations/{uuid.uuid4()}", headers=keys.op)
    assert missing.status_code == 404
    assert missing.json()["type"].endswith("bulk-operation-not-found")


async def test_cancel_prefer_wait_and_events(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    await unresolved_jobs(client, driver, keys.a, 1, "c=1")
    queued = (await start(client, keys.op, action="resume", filter={"tag": ["c=1"]})).json()
    canceled = await client.post(f"{queued['links']['self']}/cancel", headers=keys.op)
    assert canceled.status_code == 202
    assert canceled.json()["state"] == "canceled"
    assert canceled.json()["counts"]["matched"] == 0
    again = await client.post(f"{queued['links']['self']}/cancel", headers=keys.op)
    assert again.status_code == 409
    assert again.json()["type"].endswith("bulk-operation-ended")
    assert again.json()["state"] == "canceled"
    assert await runner(engine, transitions).run_once() == 0  # a canceled one never runs

    op = (await start(client, keys.op, action="resume", filter={"tag": ["c=1"]})).json()
    held = await client.get(op["links"]["self"], headers={**keys.op, "Prefer": "wait=1"})
    assert held.json()["state"] == "queued"
    assert held.headers["Preference-Applied"] == "wait=1"
    await runner(engine, transitions).run_once()
    ended = await client.get(op["links"]["self"], headers={**keys.op, "Prefer": "wait=5"})
    assert ended.json()["state"] == "succeeded"
    stream = await client.get(op["links"]["events"], headers=keys.op)
    events = parse_sse(stream.text)
    progress = [e for e in events if e.get("event") == "progress"]
    assert progress
    assert '"succeeded"' in progress[-1]["data"]
    listed = (await client.get("/v1/bulk-operations", headers=keys.op)).json()
    assert [o["id"] for o in listed["items"]] == [op["id"], queued["id"]]


async def test_a_held_read_and_the_stream_follow_a_running_operation_batch_by_batch(
    live_api: LiveApi,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    """Mid-run, over real HTTP: the stream of a running operation shows each batch as it
    commits -- a ``progress`` event, state ``running``, with the counts so far -- before
    the one that ends it; a held read (``Prefer: wait``) begun while it runs is answered
    as soon as its last batch ends it, well before its wait, with the final counts."""
    async with httpx.AsyncClient(base_url=live_api.url, timeout=30) as http:
        await unresolved_jobs(http, driver, keys.a, 3, "m=1")
        op = (await start(http, keys.op, action="resume", filter={"tag": ["m=1"]})).json()
        run = runner(engine, transitions, batch_size=2)  # 3 jobs: a batch of 2, then 1
        async with engine.begin() as conn:
            claimed = await run.batches.claim(conn)
        assert claimed is not None
        assert str(claimed.id) == op["id"]

        async def held() -> tuple[httpx.Response, float]:
            began = time.monotonic()
            answer = await http.get(op["links"]["self"], headers={**keys.op, "Prefer": "wait=5"})
            return answer, time.monotonic() - began

        async with http.stream("GET", op["links"]["events"], headers=keys.op) as stream:
            assert stream.status_code == 200
            events = streamed_events(stream)
            claimed_event = await anext(events)
            assert claimed_event["event"] == "progress"
            assert json.loads(claimed_event["data"])["state"] == "running"
            holding = asyncio.create_task(held())

            async with engine.begin() as conn:
                assert (await run.batches.run_batch(conn, claimed.id)).state == "running"
            async with asyncio.timeout(10):
                midway = await anext(events)
            assert midway["event"] == "progress"
            during = json.loads(midway["data"])
            assert during["state"] == "running"
            assert during["counts"]["matched"] == 2
            assert during["counts"]["done"] == 2
            assert during["finished_at"] is None
            assert int(midway["id"]) > int(claimed_event["id"])
            assert not holding.done()  # held until the operation ends

            async with engine.begin() as conn:
                assert (await run.batches.run_batch(conn, claimed.id)).state == "succeeded"
            async with asyncio.timeout(10):
                last = await anext(events)
                assert [e async for e in events] == []  # the stream ends with it
            assert json.loads(last["data"])["state"] == "succeeded"
            assert json.loads(last["data"])["counts"]["done"] == 3

        answer, took = await holding
        assert answer.status_code == 200, answer.text
        assert answer.headers["Preference-Applied"] == "wait=5"
        assert answer.json()["state"] == "succeeded"
        assert answer.json()["counts"] == {
            "matched": 3,
            "done": 3,
            "skipped": 0,
            "skipped_by_reason": {},
        }
        assert took < 5


async def test_a_batch_the_database_refuses_ends_the_operation_failed_earlier_batches_stand(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    """A batch that raises (here the database refuses a job's update) is rolled back
    whole and ends the operation ``failed`` with its error; the batches committed before
    it stand, and a failed operation is not run again."""
    stuck = sorted(await unresolved_jobs(client, driver, keys.a, 5, "f=1"), key=uuid.UUID)
    refused = uuid.UUID(stuck[2])  # oldest first, 2 a batch: the second batch's first job
    async with engine.begin() as conn:
        await conn.execute(
            text(
                """
                CREATE FUNCTION refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION 'job % refused', OLD.id;
                END $$
                """
            )
        )
        await conn.execute(
            text(
                "CREATE TRIGGER refuse_job BEFORE UPDATE ON jobs FOR EACH ROW"
                f" WHEN (OLD.id = '{refused}'::uuid) EXECUTE FUNCTION refuse_job()"
            )
        )
    op = (
        await start(client, keys.op, action="resume", filter={"tag": ["f=1"]}, note="retry")
    ).json()

    assert await runner(engine, transitions, batch_size=2).run_once() == 1  # then it failed
    ended = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert ended["state"] == "failed"
    assert ended["error"]["code"] == "bulk_operation_failed"
    assert ended["error"]["message"] == "DBAPIError"  # the exception's class: no SQL, no ids
    assert ended["counts"] == {"matched": 2, "done": 2, "skipped": 0, "skipped_by_reason": {}}
    assert ended["finished_at"] is not None
    assert ended["links"]["cancel"] is None
    for job_id in stuck[:2]:
        status = (await client.get(f"/v1/jobs/{job_id}", headers=keys.op)).json()
        assert (status["state"], status["reason"]) == ("queued", "resumed")
        history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.op)).json()
        [resumed] = [i for i in history["items"] if i["transition"] == "resume"]
        assert resumed["data"] == {"bulk_operation": op["id"]}
    for job_id in stuck[2:]:  # the failed batch rolled back whole, the rest never ran
        assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.op)).json()[
            "state"
        ] == "unresolved"
        history = (await client.get(f"/v1/jobs/{job_id}/history", headers=keys.op)).json()
        assert "resume" not in [i["transition"] for i in history["items"]]
    assert await runner(engine, transitions).run_once() == 0  # a failed one is not rerun
    held = await client.get(op["links"]["self"], headers={**keys.op, "Prefer": "wait=5"})
    assert held.json()["state"] == "failed"  # it has ended: answered at once
    events = parse_sse((await client.get(op["links"]["events"], headers=keys.op)).text)
    assert json.loads(events[-1]["data"])["state"] == "failed"


async def test_a_running_operation_canceled_stops_before_its_next_batch(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    await unresolved_jobs(client, driver, keys.a, 3, "k=1")
    op = (await start(client, keys.op, action="resume", filter={"tag": ["k=1"]})).json()
    run = runner(engine, transitions, batch_size=1)
    async with engine.begin() as conn:
        claimed = await run.batches.claim(conn)
    assert claimed is not None
    async with engine.begin() as conn:
        await run.batches.run_batch(conn, claimed.id)
    await client.post(f"{op['links']['self']}/cancel", headers=keys.op)
    async with engine.begin() as conn:
        await run.batches.run_batch(conn, claimed.id)
    ended = (await client.get(op["links"]["self"], headers=keys.op)).json()
    assert ended["state"] == "canceled"
    assert ended["counts"]["done"] == 1
    async with engine.connect() as conn:
        unresolved = await conn.scalar(text("SELECT count(*) FROM jobs WHERE state = 'unresolved'"))
    assert unresolved == 2


WALK = text(
    "SELECT position, through_seq, through_id, after_id FROM bulk_operations WHERE id = :id"
)


async def test_a_filter_walks_by_id_across_owners_and_by_seq_for_one_owner(
    client: httpx.AsyncClient,
    keys: Keys,
    driver: Driver,
    engine: AsyncEngine,
    transitions: Transitions,
) -> None:
    """Across owners an operation walks ``pk_jobs`` (its position is ``after_id``, up to
    ``through_id``: the newest job when it was accepted); one owner's filter walks that
    owner's ``(owner, seq)`` (``position`` up to ``through_seq``). Both act on every
    job they matched once, in batches, and on no job created after they were accepted."""
    alices = await unresolved_jobs(client, driver, keys.a, 3, "walk=w")
    bobs = await unresolved_jobs(client, driver, keys.b, 2, "walk=w")
    every = (await start(client, keys.op, action="cancel", filter={"tag": ["walk=w"]})).json()
    only = (
        await start(client, keys.op, action="fail", filter={"tag": ["walk=w"], "owner": ["bob"]})
    ).json()
    async with engine.connect() as conn:
        across = (await conn.execute(WALK, {"id": uuid.UUID(every["id"])})).one()
        one = (await conn.execute(WALK, {"id": uuid.UUID(only["id"])})).one()
    assert across.through_seq is None
    assert str(across.through_id) == max([*alices, *bobs], key=uuid.UUID)
    assert across.after_id is None
    assert one.through_id is None
    assert one.through_seq is not None
    later = await unresolved_jobs(client, driver, keys.b, 1, "walk=w")

    # the oldest operation runs first: across owners
    assert await runner(engine, transitions, batch_size=2).run_once() == 3  # 5 jobs, by 2
    async with engine.connect() as conn:
        across = (await conn.execute(WALK, {"id": uuid.UUID(every["id"])})).one()
    assert str(across.after_id) == max([*alices, *bobs], key=uuid.UUID)
    assert across.position == 0
    done = (await client.get(every["links"]["self"], headers=keys.op)).json()
    assert done["state"] == "succeeded"
    assert done["counts"]["matched"] == 5
    assert done["counts"]["done"] == 5
    for job_id in [*alices, *bobs]:
        assert (await client.get(f"/v1/jobs/{job_id}", headers=keys.op)).json()["state"] == (
            "canceled"
        )
    assert (await client.get(f"/v1/jobs/{later[0]}", headers=keys.op)).json()[
        "state"
    ] == "unresolved"

    assert await runner(engine, transitions, batch_size=2).run_once() == 2  # 2 jobs, then none
    ended = (await client.get(only["links"]["self"], headers=keys.op)).json()
    assert ended["state"] == "succeeded"
    assert ended["counts"]["matched"] == 2  # bob's, not the later one
    assert ended["counts"]["done"] == 0  # already canceled by the first
    async with engine.connect() as conn:
        one = (await conn.execute(WALK, {"id": uuid.UUID(only["id"])})).one()
        newest_of_bob = await conn.scalar(
            text("SELECT seq FROM jobs WHERE id = :id"), {"id": uuid.UUID(bobs[-1])}
        )
    assert one.after_id is None
    assert one.position == newest_of_bob
    assert (await client.get(f"/v1/jobs/{later[0]}", headers=keys.op)).json()[
        "state"
    ] == "unresolved"
