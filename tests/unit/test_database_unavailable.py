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

from atlas_jobs._app.api.errors import install_error_handlers, unexpected_error_fields
from atlas_jobs._app.db.driver import ConnectionLostError
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
    # The driver's own errors, from a statement sent past SQLAlchemy (atlas_jobs._app.db.driver).
    asyncpg.exceptions.AdminShutdownError("terminating connection"),
    asyncpg.exceptions.ReadOnlySQLTransactionError("read-only transaction"),
    ConnectionLostError("InterfaceError"),  # the connection closed under the statement
]
BUGS = [
    RuntimeError("a bug"),
    _wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key")),
    _wrapped(asyncpg.exceptions.UndefinedColumnError("no such column")),
    asyncpg.exceptions.CheckViolationError("new row violates check constraint"),
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


def test_an_unexpected_driver_error_is_logged_with_its_sqlstate_not_its_message() -> None:
    """A statement sent past SQLAlchemy raises the driver's own error: its log fields
    carry the class and SQLSTATE as a wrapped one's do, never the message (which can
    quote the values)."""
    fields = unexpected_error_fields(
        asyncpg.exceptions.CheckViolationError("Key (owner)=(secret) violates")
    )
    assert fields["db_error_type"] == "CheckViolationError"
    assert fields["sqlstate"] == "23514"
    assert "secret" not in repr(fields)
