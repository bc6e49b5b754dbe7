"""One source of time: *database* time, so every process agrees on it.

Leases, deadlines, retention, retry budgets and ``Retry-After`` are all decided against
the database's ``now()``: in SQLAlchemy Core as :meth:`Clock.now`, in named SQL as
:data:`NOW_SQL` with :meth:`Clock.bind`'s parameter. Tests move time forward with
:meth:`Clock.advance`; nothing else reads a clock to decide anything about a job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, literal
from sqlalchemy.dialects.postgresql import INTERVAL

NOW_SQL = "(now() + make_interval(secs => :clock_offset))"
"""Database time in named SQL; bind ``clock_offset`` with :meth:`Clock.bind`."""


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

    def bind(self) -> dict[str, float]:
        """The parameter :data:`NOW_SQL` needs."""
        return {"clock_offset": self.offset.total_seconds()}

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


SYSTEM_CLOCK = Clock()
