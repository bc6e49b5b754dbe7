"""Not before (``run_at``/``delay_seconds``), the reschedule action and the start deadline
(``start_by``/``start_within_seconds``) over HTTP, in-process; time moves by the shared
test clock (database time plus an offset), the claim and the sweeper are the real ones."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db.schema import attempts, job_history, jobs, webhook_deliveries
from atlas_jobs._app.presentation import Observation, present
from atlas_jobs._app.settings import Settings
from atlas_jobs._app.storage import FilesystemStore
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._workers.scheduler import Scheduler
from atlas_jobs._workers.sweeper import Sweeper
from tests.api.support import BUNDLE_HANDLER, BUNDLE_INPUT, Driver, Keys

BUNDLE: dict[str, Any] = {"kind": "atlas.bundle", "input": BUNDLE_INPUT}
YEAR = timedelta(days=365)


@pytest.fixture
def api_settings(api_settings: Settings) -> Settings:
    """A webhook receiver on 127.0.0.1 may be registered (the ending is notified)."""
    return api_settings.model_copy(update={"webhook_internal_hosts": "127.0.0.1"})


def at(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


async def create(client: httpx.AsyncClient, keys: Keys, **timing: Any) -> dict[str, Any]:
    response = await client.post("/v1/jobs", json={**BUNDLE, **timing}, headers=keys.a)
    assert response.status_code == 202, response.text
    return dict(response.json())


async def claimable(engine: AsyncEngine, transitions: Transitions) -> list[uuid.UUID]:
    """What a worker serving atlas.bundle@1 claims now (the real claim statement)."""
    async with engine.begin() as conn:
        claimed = await transitions.claim(
            conn, worker_id="w-timing", handlers=[BUNDLE_HANDLER], limit=10
        )
    return [row.id for row in claimed]


async def problem(
    client: httpx.AsyncClient, keys: Keys, path: str, body: dict[str, Any], status: int
) -> dict[str, Any]:
    response = await client.post(path, json=body, headers=keys.a)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def locs(found: dict[str, Any]) -> set[str]:
    return {".".join(error["loc"]) for error in found["errors"]}


async def transitions_of(engine: AsyncEngine, job_id: str) -> list[tuple[str, str, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(job_history.c.transition, job_history.c.to_state, job_history.c.reason)
            .where(job_history.c.job_id == uuid.UUID(job_id))
            .order_by(job_history.c.seq)
        )
        return [(row.transition, row.to_state, row.reason) for row in rows]


# -- not before -------------------------------------------------------------------------


async def test_a_delayed_job_is_queued_scheduled_and_not_claimed_before_its_run_at(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    response = await client.post("/v1/jobs", json={**BUNDLE, "delay_seconds": 600}, headers=keys.a)
    assert response.status_code == 202
    body = response.json()
    run_at = when(body["run_at"])
    assert body["state"] == "queued"
    assert body["reason"] == "new"
    assert run_at is not None
    assert timedelta(seconds=590) < run_at - when(body["created_at"]) <= timedelta(seconds=601)  # type: ignore[operator]
    assert body["waiting_for"]["reason"] == "scheduled"
    assert when(body["waiting_for"]["run_at"]) == run_at
    assert int(response.headers["retry-after"]) == 60  # polite: capped, not every 2 s
    assert response.headers["etag"].endswith('-scheduled"')
    label = present(body, Observation.FRESH).label
    # The time of day, with the date when run_at falls on another day (past midnight UTC).
    assert label in (
        f"Queued — scheduled for {run_at:%H:%M} UTC",
        f"Queued — scheduled for {run_at:%Y-%m-%d %H:%M} UTC",
    )

    assert await claimable(engine, transitions) == []
    clock.advance(601)
    read = (await client.get(f"/v1/jobs/{body['id']}", headers=keys.a)).json()
    assert read["run_at"] == body["run_at"]  # what was asked for stays readable
    assert read["waiting_for"] is None or read["waiting_for"]["reason"] != "scheduled"
    assert await claimable(engine, transitions) == [uuid.UUID(body["id"])]


async def test_run_at_names_the_instant_and_one_in_the_past_means_now(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    target = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=3)
    later = await create(client, keys, run_at=at(target))
    assert when(later["run_at"]) == target
    assert when(later["waiting_for"]["run_at"]) == target

    past = await create(client, keys, run_at="2020-01-01T00:00:00+01:00")
    stored = when(past["run_at"])
    assert stored is not None
    assert stored >= when(past["created_at"])
    assert past["waiting_for"] is None or past["waiting_for"]["reason"] != "scheduled"
    assert await claimable(engine, transitions) == [uuid.UUID(past["id"])]


async def test_a_job_without_timing_has_neither_and_is_claimed_at_once(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    body = await create(client, keys)
    assert body["run_at"] is None
    assert body["start_by"] is None
    assert await claimable(engine, transitions) == [uuid.UUID(body["id"])]


async def test_a_batch_carries_each_items_own_timing(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    response = await client.post(
        "/v1/jobs:batch",
        json={
            "jobs": [
                {**BUNDLE, "delay_seconds": 3600},
                BUNDLE,
                {**BUNDLE, "start_within_seconds": 900},
            ]
        },
        headers=keys.a,
    )
    assert response.status_code == 202, response.text
    delayed, plain, deadline = response.json()["items"]
    assert delayed["run_at"] is not None
    assert delayed["waiting_for"]["reason"] == "scheduled"
    assert plain["run_at"] is None
    assert plain["start_by"] is None
    assert deadline["run_at"] is None
    assert deadline["start_by"] is not None
    assert set(await claimable(engine, transitions)) == {
        uuid.UUID(plain["id"]),
        uuid.UUID(deadline["id"]),
    }


@pytest.mark.parametrize(
    ("timing", "where"),
    [
        ({"run_at": "2026-12-02T09:00:00Z", "delay_seconds": 5}, {"run_at", "delay_seconds"}),
        (
            {"start_by": "2099-01-01T00:00:00Z", "start_within_seconds": 5},
            {"start_by", "start_within_seconds"},
        ),
        ({"run_at": "tomorrow"}, {"run_at"}),
        ({"run_at": "2026-12-02T09:00:00"}, {"run_at"}),  # no offset: not RFC 3339
        ({"run_at": 1764666000}, {"run_at"}),  # a number of seconds is not an instant
        ({"run_at": "FAR"}, {"run_at"}),
        ({"delay_seconds": -1}, {"delay_seconds"}),
        ({"delay_seconds": 365 * 86400 + 1}, {"delay_seconds"}),
        ({"delay_seconds": "soon"}, {"delay_seconds"}),
        ({"start_by": "FAR"}, {"start_by"}),
        ({"start_by": "2020-01-01T00:00:00Z"}, {"start_by"}),
        ({"start_within_seconds": 0}, {"start_within_seconds"}),
        ({"run_at": "SOON", "start_by": "SOONER"}, {"start_by"}),
        ({"delay_seconds": 600, "start_within_seconds": 600}, {"start_within_seconds"}),
    ],
)
async def test_bad_timing_is_422_naming_the_field_and_creates_nothing(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    timing: dict[str, Any],
    where: set[str],
) -> None:
    now = datetime.now(UTC)
    moments = {
        "FAR": at(now + YEAR + timedelta(days=1)),
        "SOON": at(now + timedelta(hours=2)),
        "SOONER": at(now + timedelta(hours=1)),
    }
    timing = {name: moments.get(value, value) for name, value in timing.items()}
    found = await problem(client, keys, "/v1/jobs", {**BUNDLE, **timing}, 422)
    assert locs(found) == {f"body.{name}" for name in where}
    batch = await problem(
        client, keys, "/v1/jobs:batch", {"jobs": [BUNDLE, {**BUNDLE, **timing}]}, 422
    )
    assert locs(batch) == {f"body.jobs.1.{name}" for name in where}
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(jobs)) == 0


async def test_the_idempotency_key_covers_the_timing(client: httpx.AsyncClient, keys: Keys) -> None:
    first_at = at(datetime.now(UTC) + timedelta(hours=1))
    key = {"Idempotency-Key": "nightly-1"}
    body = {**BUNDLE, "run_at": first_at}
    first = await client.post("/v1/jobs", json=body, headers={**keys.a, **key})
    assert first.status_code == 202
    again = await client.post("/v1/jobs", json=body, headers={**keys.a, **key})
    assert again.status_code == 202
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    moved = {**BUNDLE, "run_at": at(datetime.now(UTC) + timedelta(hours=2))}
    for other in (moved, BUNDLE, {**BUNDLE, "run_at": first_at, "start_within_seconds": 9000}):
        refused = await client.post("/v1/jobs", json=other, headers={**keys.a, **key})
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["type"] == "key_reused"
    # A relative delay is fingerprinted as sent: a retried request is the same body.
    delayed = {**BUNDLE, "delay_seconds": 60}
    key2 = {"Idempotency-Key": "in-a-minute"}
    one = await client.post("/v1/jobs", json=delayed, headers={**keys.a, **key2})
    two = await client.post("/v1/jobs", json=delayed, headers={**keys.a, **key2})
    assert one.json()["id"] == two.json()["id"]
    batch = await client.post(
        "/v1/jobs:batch",
        json={"jobs": [{**BUNDLE, "delay_seconds": 61, "idempotency_key": "in-a-minute"}]},
        headers=keys.a,
    )
    assert batch.status_code == 422


# -- reschedule -------------------------------------------------------------------------


async def test_the_owner_moves_and_drops_the_delay_recorded_in_the_history(
    client: httpx.AsyncClient, keys: Keys, engine: AsyncEngine, transitions: Transitions
) -> None:
    job = await create(client, keys, delay_seconds=3600)
    path = f"/v1/jobs/{job['id']}/reschedule"
    target = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=5)
    moved = await client.post(path, json={"run_at": at(target)}, headers=keys.a)
    assert moved.status_code == 200, moved.text
    assert moved.json()["state"] == "queued"
    assert when(moved.json()["run_at"]) == target
    assert moved.json()["waiting_for"]["reason"] == "scheduled"
    assert moved.headers["etag"] != f'W/"{job["id"]}"'

    sooner = await client.post(path, json={"delay_seconds": 120}, headers=keys.a)
    assert sooner.status_code == 200
    assert when(sooner.json()["run_at"]) < target  # type: ignore[operator]
    assert await claimable(engine, transitions) == []

    dropped = await client.post(path, json={}, headers=keys.a)
    assert dropped.status_code == 200
    assert dropped.json()["run_at"] is None
    assert (
        dropped.json()["waiting_for"] is None
        or dropped.json()["waiting_for"]["reason"] != "scheduled"
    )
    history = (await client.get(f"/v1/jobs/{job['id']}/history", headers=keys.a)).json()["items"]
    assert [(i["transition"], i["from"], i["to"]) for i in history] == [
        ("create", None, "queued"),
        ("reschedule", "queued", "queued"),
        ("reschedule", "queued", "queued"),
        ("reschedule", "queued", "queued"),
    ]
    assert history[1]["data"] == {"run_at": target.isoformat()}
    assert history[2]["data"] == {"delay_seconds": 120.0}
    assert history[3]["data"] == {"run_at": None}
    assert history[1]["actor"] == "client:alice"
    assert await claimable(engine, transitions) == [uuid.UUID(job["id"])]


async def test_rescheduling_a_claimed_or_ended_job_is_409_naming_the_state(
    client: httpx.AsyncClient, keys: Keys, driver: Driver
) -> None:
    job = await create(client, keys)
    path = f"/v1/jobs/{job['id']}/reschedule"
    await driver.claim(uuid.UUID(job["id"]))
    running = await problem(client, keys, path, {"delay_seconds": 60}, 409)
    assert running["state"] == "running"
    assert "running" in running["detail"]
    ended = await create(client, keys)
    await driver.fail(uuid.UUID(ended["id"]))
    failed = await problem(client, keys, f"/v1/jobs/{ended['id']}/reschedule", {}, 409)
    assert failed["state"] == "failed"
    history = (await client.get(f"/v1/jobs/{job['id']}/history", headers=keys.a)).json()["items"]
    assert "reschedule" not in {i["transition"] for i in history}


async def test_reschedule_bad_input_is_422_and_another_owners_job_is_404(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    job = await create(client, keys, delay_seconds=60, start_within_seconds=3600)
    path = f"/v1/jobs/{job['id']}/reschedule"
    far = at(datetime.now(UTC) + YEAR + timedelta(days=1))
    both = await problem(client, keys, path, {"run_at": far, "delay_seconds": 1}, 422)
    assert locs(both) == {"body.run_at", "body.delay_seconds"}
    assert locs(await problem(client, keys, path, {"run_at": far}, 422)) == {"body.run_at"}
    assert locs(await problem(client, keys, path, {"run_at": "noon"}, 422)) == {"body.run_at"}
    assert locs(await problem(client, keys, path, {"delay_seconds": -5}, 422)) == {
        "body.delay_seconds"
    }
    # Not before the start deadline: the job could never start.
    late = await problem(client, keys, path, {"delay_seconds": 7200}, 422)
    assert locs(late) == {"body.delay_seconds"}
    after = at(datetime.now(UTC) + timedelta(hours=2))
    assert locs(await problem(client, keys, path, {"run_at": after}, 422)) == {"body.run_at"}
    other = await client.post(path, json={}, headers=keys.b)
    assert other.status_code == 404
    unchanged = (await client.get(f"/v1/jobs/{job['id']}", headers=keys.a)).json()
    assert unchanged["run_at"] == job["run_at"]


# -- start deadline ---------------------------------------------------------------------


async def test_a_job_not_claimed_by_its_start_by_never_starts_and_the_sweeper_ends_it(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
    data_dir: Path,
) -> None:
    hook = await client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/h"}, headers=keys.a)
    assert hook.status_code == 201, hook.text
    deadline = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=10)
    job = await create(client, keys, start_by=at(deadline), notify=hook.json()["id"])
    assert when(job["start_by"]) == deadline
    assert job["waiting_for"] is None or job["waiting_for"]["reason"] == "no_worker"
    path = f"/v1/jobs/{job['id']}"

    clock.advance(11 * 60)  # past the deadline, before any sweep
    read = await client.get(path, headers=keys.a)
    status = read.json()
    assert status["state"] == "queued"
    assert status["waiting_for"]["reason"] == "start_deadline_passed"
    assert when(status["waiting_for"]["start_by"]) == deadline
    assert read.headers["etag"].endswith('-start_deadline_passed"')
    label = present(status, Observation.FRESH).label
    assert label == "Queued — not started by its start deadline; it will not run"
    assert await claimable(engine, transitions) == []  # the database clock decides
    moved = await problem(client, keys, f"{path}/reschedule", {}, 409)
    assert moved["state"] == "queued"
    assert "start deadline" in moved["detail"]

    sweeper = Sweeper(engine, transitions, FilesystemStore(data_dir / "results"))
    assert (await sweeper.run_once()).missed_starts == 1
    ended = (await client.get(path, headers=keys.a)).json()
    assert (ended["state"], ended["reason"]) == ("failed", "start_deadline_passed")
    assert ended["error"]["code"] == "start_deadline_passed"
    assert ended["error"]["retryable"] is False
    assert ended["finished_at"] is not None
    assert ended["attempt"] == 0
    assert ended["waiting_for"] is None
    assert present(ended, Observation.FRESH).label.startswith("Failed: ")
    assert await transitions_of(engine, job["id"]) == [
        ("create", "queued", "new"),
        ("miss_start", "failed", "start_deadline_passed"),
    ]
    async with engine.connect() as conn:
        assert (
            await conn.scalar(
                select(func.count())
                .select_from(attempts)
                .where(attempts.c.job_id == uuid.UUID(job["id"]))
            )
            == 0
        )
        events = await conn.execute(
            select(webhook_deliveries.c.event).where(
                webhook_deliveries.c.job_id == uuid.UUID(job["id"])
            )
        )
        assert [row.event for row in events] == ["job.failed"]
    assert (await sweeper.run_once()).missed_starts == 0


async def test_a_deadline_still_ahead_lets_the_job_start_and_the_sweeper_leaves_it(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
    data_dir: Path,
) -> None:
    job = await create(client, keys, delay_seconds=60, start_within_seconds=600)
    clock.advance(61)
    sweeper = Sweeper(engine, transitions, FilesystemStore(data_dir / "results"))
    assert (await sweeper.run_once()).missed_starts == 0
    assert await claimable(engine, transitions) == [uuid.UUID(job["id"])]
    clock.advance(3600)  # a started job is past its start deadline's reach
    assert (await sweeper.run_once()).missed_starts == 0
    status = (await client.get(f"/v1/jobs/{job['id']}", headers=keys.a)).json()
    assert status["state"] == "running"


# -- schedules --------------------------------------------------------------------------


async def test_a_schedules_jobs_are_timed_from_their_tick(
    client: httpx.AsyncClient,
    keys: Keys,
    engine: AsyncEngine,
    transitions: Transitions,
    clock: Clock,
) -> None:
    job = {"kind": "atlas.noop", "input": {}, "delay_seconds": 30, "start_within_seconds": 90}
    made = await client.post(
        "/v1/schedules",
        json={"cron": "* * * * * */10", "timezone": "UTC", "job": job},
        headers=keys.a,
    )
    assert made.status_code == 201, made.text
    schedule = made.json()
    assert schedule["job"]["delay_seconds"] == 30
    assert schedule["job"]["start_within_seconds"] == 90
    clock.advance(15)
    assert await Scheduler(engine, transitions).run_once() >= 1
    fire = (await client.get(schedule["url"] + "/fires", headers=keys.a)).json()["items"][-1]
    status = (await client.get(fire["job_url"], headers=keys.a)).json()
    tick = when(fire["tick"])
    assert tick is not None
    assert when(status["run_at"]) == tick + timedelta(seconds=30)
    assert when(status["start_by"]) == tick + timedelta(seconds=90)
    assert status["waiting_for"]["reason"] == "scheduled"

    for bad, where in (
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at"),
        ({"start_by": "2030-01-01T00:00:00Z"}, "start_by"),
        ({"delay_seconds": 60, "start_within_seconds": 60}, "start_within_seconds"),
    ):
        refused = await client.post(
            "/v1/schedules",
            json={"cron": "0 2 * * *", "timezone": "UTC", "job": {**job, **bad}},
            headers=keys.a,
        )
        assert refused.status_code == 422, refused.text
        assert locs(refused.json()) == {f"body.job.{where}"}
    changed = await client.patch(
        schedule["url"], json={"job": {"kind": "atlas.noop", "input": {}}}, headers=keys.a
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["job"]["delay_seconds"] is None


async def test_a_held_read_over_the_run_at_answers_the_job_no_longer_scheduled(
    client: httpx.AsyncClient, keys: Keys
) -> None:
    job = await create(client, keys, delay_seconds=2)
    path = f"/v1/jobs/{job['id']}"
    tag = (await client.get(path, headers=keys.a)).headers["etag"]
    assert tag.endswith('-scheduled"')
    # Held from before the run_at to after it: the row (and the feed's snapshot of it)
    # does not change, the hold on the job does -- the answer is not a 304.
    held = await client.get(path, headers={**keys.a, "Prefer": "wait=4", "If-None-Match": tag})
    assert held.status_code == 200
    assert held.headers["etag"] != tag
    body = held.json()
    assert body["waiting_for"] is None or body["waiting_for"]["reason"] != "scheduled"
