"""What an engine sends, as the driver receives it (``before_cursor_execute``), for tests
that pin a statement's shape, what it binds, or how many round trips a path costs. The
one home of these recorders; each test asserts on what it reads from them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

CLAIM_PREFIX = "WITH lanes AS"
"""How every claim statement starts (``atlas_jobs._app.db.queries``: ``CLAIM``,
``CLAIM_TO_RUN``)."""


def folded(statement: str) -> str:
    """A statement on one line, its whitespace runs folded to one space."""
    return " ".join(statement.split())


@contextmanager
def sent(engine: AsyncEngine) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """The statements (and their parameters) the engine sends meanwhile."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def on_execute(_c: Any, _cur: Any, statement: str, _p: Any, context: Any, _m: Any) -> None:
        seen.append((statement, dict(context.compiled_parameters[0])))

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", on_execute)


API_BACKGROUND_TASKS = ("metrics-sampler", "live-workers")
"""The API's loops that query on their own cadence: the metrics sampler and the
live-worker refresher (atlas_jobs._app.services.live_workers)."""


@contextmanager
def statements(
    engine: AsyncEngine, *, except_task: str | tuple[str, ...] | None = None
) -> Iterator[list[str]]:
    """Every statement the engine sends meanwhile (one round trip each), folded: through
    SQLAlchemy, and straight to the driver (the claim, atlas_jobs._app.db.driver) on the
    connections it opens meanwhile. With ``except_task``, not those of the asyncio
    task(s) of that name: a background loop that queries on its own cadence
    (:data:`API_BACKGROUND_TASKS`, whose reads can land inside the block on a busy
    machine)."""
    seen: list[str] = []
    skipped = (except_task,) if isinstance(except_task, str) else except_task

    def record(statement: str) -> None:
        if skipped is not None:
            task = asyncio.current_task()
            if task is not None and task.get_name() in skipped:
                return
        seen.append(folded(statement))

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        record(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    stop_driver = _on_driver_queries(engine, record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", on_execute)
        stop_driver()


def record_claims(engine: AsyncEngine) -> list[str]:
    """The claim statements ``engine`` sends from now on, in order, through SQLAlchemy or
    straight to the driver (as the pool claims) on the connections it opens from now on."""
    claims: list[str] = []

    def record(statement: str) -> None:
        if statement.lstrip().startswith(CLAIM_PREFIX):
            claims.append(statement)

    def on_execute(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        record(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    _on_driver_queries(engine, record)
    return claims


def _on_driver_queries(engine: AsyncEngine, record: Callable[[str], None]) -> Callable[[], None]:
    """Call ``record`` with every query sent straight to the driver (``fetch``,
    ``execute``: not SQLAlchemy's prepared executions, which the cursor event sees) on
    each connection ``engine`` opens from now on; the returned function stops it."""
    loggers: list[tuple[Any, Callable[[Any], None]]] = []

    def on_connect(dbapi_connection: Any, _record: object) -> None:
        def logger(logged: Any) -> None:
            record(logged.query)

        dbapi_connection.driver_connection.add_query_logger(logger)
        loggers.append((dbapi_connection.driver_connection, logger))

    event.listen(engine.sync_engine, "connect", on_connect)

    def stop() -> None:
        event.remove(engine.sync_engine, "connect", on_connect)
        for driver, logger in loggers:
            driver.remove_query_logger(logger)

    return stop


def record_round_trips(engine: AsyncEngine) -> list[str]:
    """Every statement ``engine`` sends from now on, in order: SQLAlchemy's executions
    and what asyncpg sends outside them (``BEGIN``, ``COMMIT``, simple queries), read by a
    query logger on every connection the engine opens from now on."""
    trips: list[str] = []

    def on_execute(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        trips.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", on_execute)
    _on_driver_queries(engine, trips.append)
    return trips
