"""The statements an engine sends, with their parameters, as the driver receives them
(``before_cursor_execute``): for tests that pin a statement's shape or what it binds."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine


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
