"""One source of time. Leases, deadlines and retention use *database* time, so every
process agrees on it; tests move it forward with :meth:`Clock.advance`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, literal
from sqlalchemy.dialects.postgresql import INTERVAL


@dataclass
class Clock:
    """Database ``now()`` plus an offset that only tests change."""

    offset: timedelta = field(default_factory=timedelta)

    def now(self) -> ColumnElement[datetime]:
        if not self.offset:
            return func.now()
        return func.now() + literal(self.offset, INTERVAL())

    def after(self, seconds: float) -> ColumnElement[datetime]:
        """``now() + seconds`` as a SQL expression."""
        return self.now() + literal(timedelta(seconds=seconds), INTERVAL())

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


SYSTEM_CLOCK = Clock()
