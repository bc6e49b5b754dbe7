"""Keyset paging, the one helper every listing uses: ask the store for ``limit + 1``
rows, show ``limit``, and name where the next page starts only when more follow.

A :class:`SeqCursor` is the opaque cursor of a newest-first listing by ``seq``: a
one-letter prefix per resource (``c`` jobs, ``s`` schedules, ``w`` webhooks) and the last
shown row's ``seq``. Its :attr:`~SeqCursor.pattern` is the query parameter's pattern, so
every well-formed cursor is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """The rows to show, and the last of them when another page follows."""

    shown: list[T]
    more: bool

    @property
    def last(self) -> T | None:
        return self.shown[-1] if self.more and self.shown else None

    def next(self, key: Callable[[T], K]) -> K | None:
        """Where the next page starts (``key`` of the last row shown), or ``None``."""
        last = self.last
        return None if last is None else key(last)


def fetch_size(limit: int) -> int:
    """How many rows to ask for: one beyond the page tells whether another follows."""
    return limit + 1


def page_of(rows: Sequence[T], limit: int) -> Page[T]:
    """The page of ``rows`` (fetched with :func:`fetch_size`)."""
    return Page(list(rows[:limit]), len(rows) > limit)


@dataclass(frozen=True, slots=True)
class SeqCursor:
    """The cursor of a listing ordered by ``seq``, newest first."""

    prefix: str

    @property
    def pattern(self) -> str:
        return rf"^{self.prefix}[0-9]{{1,18}}$"

    def parse(self, cursor: str | None) -> int | None:
        """The ``seq`` to list before (the pattern has validated the cursor)."""
        return None if cursor is None else int(cursor[len(self.prefix) :])

    def make(self, seq: int) -> str:
        return f"{self.prefix}{seq}"

    def after(self, page: Page[T], seq: Callable[[T], int]) -> str | None:
        """The next page's cursor, or ``None`` on the last page."""
        found = page.next(seq)
        return None if found is None else self.make(found)


JOB_CURSOR = SeqCursor("c")
SCHEDULE_CURSOR = SeqCursor("s")
WEBHOOK_CURSOR = SeqCursor("w")
