"""Root endpoints and the committed OpenAPI document."""

from __future__ import annotations

import json

import httpx
from fastapi import FastAPI
from sqlalchemy import text

from atlas_jobs._app.api.openapi_doc import render_openapi
from tests.api.support import BUNDLE_INPUT, Keys
from tests.support import REPO


async def test_livez_readyz_and_metrics(client: httpx.AsyncClient, keys: Keys) -> None:
    assert (await client.get("/livez")).json() == {"status": "ok", "checks": {}}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "migrations": "ok", "draining": "no"}
    await client.post(
        "/v1/jobs", json={"kind": "atlas.bundle", "input": BUNDLE_INPUT}, headers=keys.a
    )
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text_body = metrics.text
    assert 'atlas_http_requests_total{method="POST",route="/v1/jobs",status="202"} 1.0' in text_body
    assert "atlas_listener_connected 1.0" in text_body


async def test_readyz_is_503_when_migrations_are_behind_or_draining(
    app: FastAPI, client: httpx.AsyncClient, engine: object
) -> None:
    state = app.state.atlas
    async with state.engine.begin() as conn:
        await conn.execute(text("UPDATE alembic_version SET version_num = 'older'"))
    behind = await client.get("/readyz")
    assert behind.status_code == 503
    assert behind.json()["checks"]["migrations"] == "unknown"  # a revision nobody knows
    async with state.engine.begin() as conn:
        await conn.execute(
            text("UPDATE alembic_version SET version_num = :head"),
            {"head": next(iter(state.migration_heads))},
        )
    assert (await client.get("/readyz")).status_code == 200
    async with state.engine.begin() as conn:
        await conn.execute(text("DELETE FROM alembic_version"))
    unmigrated = await client.get("/readyz")
    assert unmigrated.status_code == 503
    assert unmigrated.json()["checks"]["migrations"] == "unmigrated"
    async with state.engine.begin() as conn:
        await conn.execute(
            text("INSERT INTO alembic_version VALUES (:head)"),
            {"head": next(iter(state.migration_heads))},
        )
    assert (await client.get("/readyz")).status_code == 200
    state.draining = True
    draining = await client.get("/readyz")
    assert draining.status_code == 503
    assert draining.json()["checks"]["draining"] == "yes"


def test_committed_openapi_matches_the_app() -> None:
    committed = (REPO / "openapi" / "openapi.json").read_text()
    assert committed == render_openapi(), "run `make openapi` and commit openapi/openapi.json"


def test_openapi_has_stable_operation_ids_tags_and_problem_answers() -> None:
    document = json.loads(render_openapi())
    operations = {
        op["operationId"]: op for path in document["paths"].values() for op in path.values()
    }
    assert {
        "jobs-create",
        "jobs-batch",
        "jobs-get",
        "jobs-list",
        "jobs-cancel",
        "jobs-reschedule",
        "jobs-history",
        "events-stream",
        "results-get",
        "results-download",
        "reviews-create",
        "signals-create",
        "operations-resume",
        "operations-fail",
        "operations-replay",
        "operations-queue",
        "operations-end-sessions",
        "operations-pause-kind",
        "operations-resume-kind",
        "operations-list-pauses",
        "bulk-operations-create",
        "bulk-operations-list",
        "bulk-operations-get",
        "bulk-operations-stream",
        "bulk-operations-cancel",
        "scheduling-settings",
        "scheduling-changes",
        "scheduling-set-owner-share",
        "scheduling-set-concurrency-key",
        "kinds-list",
        "health-livez",
        "health-readyz",
        "health-metrics",
        "schedules-create",
        "schedules-list",
        "schedules-read",
        "schedules-change",
        "schedules-delete",
        "schedules-fires",
        "webhooks-create",
        "webhooks-list",
        "webhooks-read",
        "webhooks-delete",
        "webhooks-notifications",
    } == set(operations)
    for operation_id, operation in operations.items():
        assert len(operation["tags"]) == 1, operation_id
        for code, answer in operation["responses"].items():
            if code.startswith("4"):
                assert list(answer["content"]) == ["application/problem+json"], (operation_id, code)
    create = operations["jobs-create"]["responses"]["202"]["headers"]
    assert {"Location", "Retry-After", "Idempotency-Replayed"} <= set(create)
    schemas = document["components"]["schemas"]
    assert set(schemas["JobState"]["enum"]) == {
        "queued", "running", "waiting", "unresolved", "cancel_requested",
        "succeeded", "failed", "canceled",
    }  # fmt: skip
    assert "available" in schemas["DeliveryState"]["enum"]
