"""The framework ceiling for ``make bench``: a bare FastAPI app doing ONE statement per
request -- an ``INSERT`` for a create, a ``SELECT`` for a read -- on a table of its own,
with the project's engine settings (``atlas_jobs._app.db.engine.create_engine``: same pool size,
``pool_pre_ping``, asyncpg) and served by uvicorn exactly as ``atlas-jobs api`` serves
the real app (h11, the same head-size bound, ``limit_concurrency`` and keep-alive, no
access log). No authentication, no admission, no history, no middleware: whatever the
real endpoint costs beyond this is ours.

``python -m benchmarks.bare_app --port P`` with ``DATABASE_URL`` set; the table
(``bench_bare_jobs``) is created at start-up if missing.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Response, status
from pydantic import BaseModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.db.engine import create_engine, resolve_database_url
from atlas_jobs._app.settings import Settings, get_settings

TABLE = "bench_bare_jobs"
DDL = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    owner text NOT NULL,
    kind text NOT NULL,
    input jsonb NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    idempotency_key text UNIQUE,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""
INSERT = text(f"""
INSERT INTO {TABLE} (owner, kind, input, idempotency_key)
VALUES (:owner, :kind, CAST(:input AS jsonb), :key)
RETURNING id, kind, input, state, version, created_at
""")
SELECT = text(f"""
SELECT id, kind, input, state, version, created_at FROM {TABLE} WHERE id = :id
""")
OWNER = "bench"


class BareCreate(BaseModel):
    kind: str
    input: dict[str, Any]


class BarePublic(BaseModel):
    id: uuid.UUID
    kind: str
    input: dict[str, Any]
    state: str
    version: int
    created_at: datetime


def etag(version: int) -> str:
    return f'W/"{version}"'


def create_bare_app(settings: Settings) -> FastAPI:
    engines: list[AsyncEngine] = []

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        engine = create_engine(
            resolve_database_url(settings),
            pool_size=settings.db_pool_size,
            application_name="atlas-bench-bare",
        )
        async with engine.begin() as conn:
            await conn.execute(text(DDL))
        engines.append(engine)
        try:
            yield
        finally:
            await engine.dispose()

    app = FastAPI(title="bare", lifespan=lifespan)

    @app.get("/readyz")
    async def readyz() -> dict[str, str]:
        return {"status": "ready"}

    @app.post("/bare/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=BarePublic)
    async def create(
        body: BareCreate,
        response: Response,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
    ) -> Any:
        async with engines[0].begin() as conn:
            row = (
                await conn.execute(
                    INSERT,
                    {
                        "owner": OWNER,
                        "kind": body.kind,
                        "input": json.dumps(body.input),
                        "key": idempotency_key,
                    },
                )
            ).one()
        response.headers["Location"] = f"/bare/jobs/{row.id}"
        response.headers["ETag"] = etag(row.version)
        return row._mapping

    @app.get("/bare/jobs/{job_id}", response_model=BarePublic)
    async def read(
        job_id: uuid.UUID,
        response: Response,
        if_none_match: Annotated[str | None, Header(alias="If-None-Match")] = None,
    ) -> Any:
        async with engines[0].connect() as conn:
            row = (await conn.execute(SELECT, {"id": job_id})).first()
        if row is None:
            raise HTTPException(status_code=404)
        tag = etag(row.version)
        if if_none_match == tag:
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": tag})
        response.headers["ETag"] = tag
        return row._mapping

    return app


def main(argv: Sequence[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="bare FastAPI endpoint (make bench)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    settings = get_settings()
    # The settings `atlas-jobs api` passes to uvicorn (app/cli/__init__.py), minus nothing.
    uvicorn.run(
        create_bare_app(settings),
        host=args.host,
        port=args.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) or None,
        http="h11",
        h11_max_incomplete_event_size=settings.http_max_header_bytes,
        limit_concurrency=settings.http_limit_concurrency,
        timeout_keep_alive=settings.http_keep_alive_seconds,
    )


if __name__ == "__main__":
    main()
