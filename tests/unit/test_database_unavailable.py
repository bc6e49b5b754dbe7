"""A database outage is answered 503 + Retry-After (``database-unavailable``), never 500:
found by ``make chaos`` (scenario 1, ``pg_ctl stop -m immediate``), where every request
that needed a new connection while the server was down or in recovery answered 500."""

from __future__ import annotations

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from atlas_jobs._app.api.errors import install_error_handlers
from atlas_jobs._app.db.outages import database_unavailable


def _wrapped(error: BaseException) -> DBAPIError:
    try:
        raise DBAPIError("SELECT 1", None, error)  # type: ignore[arg-type]
    except DBAPIError as exc:
        return exc


OUTAGES = [
    ConnectionRefusedError(111, "Connection refused"),
    ConnectionResetError(104, "reset"),
    PoolTimeoutError("QueuePool limit reached"),
    _wrapped(asyncpg.exceptions.CannotConnectNowError("the database system is starting up")),
    _wrapped(asyncpg.exceptions.AdminShutdownError("terminating connection")),
    _wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")),
    # A failover: the node we are on was demoted, or no host takes writes yet.
    _wrapped(asyncpg.exceptions.ReadOnlySQLTransactionError("read-only transaction")),
    asyncpg.exceptions.TargetServerAttributeNotMatched("no host matches read-write"),
]
BUGS = [
    RuntimeError("a bug"),
    _wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key")),
    _wrapped(asyncpg.exceptions.UndefinedColumnError("no such column")),
]


@pytest.mark.parametrize("exc", OUTAGES, ids=lambda e: type(e).__name__)
def test_outages_are_recognised(exc: BaseException) -> None:
    assert database_unavailable(exc)


@pytest.mark.parametrize("exc", BUGS, ids=lambda e: type(e).__name__)
def test_bugs_are_not_outages(exc: BaseException) -> None:
    assert not database_unavailable(exc)


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/down")
    async def down() -> None:
        raise _wrapped(asyncpg.exceptions.CannotConnectNowError("starting up"))

    @app.get("/refused")
    async def refused() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    @app.get("/bug")
    async def bug() -> None:
        raise RuntimeError("a bug")

    return app


async def test_an_outage_answers_503_with_retry_after_and_a_bug_500() -> None:
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        for path in ("/down", "/refused"):
            response = await http.get(path)
            assert response.status_code == 503, path
            assert response.headers["retry-after"] == "2"
            assert response.json()["type"].endswith("database-unavailable")
        assert (await http.get("/bug")).status_code == 500
