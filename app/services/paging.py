"""Keyset paging, the one helper every listing uses: ask the store for ``limit + 1``
rows, show ``limit``, and name where the next page starts only when more follow.

A :class:`SeqCursor` is the opaque cursor of a newest-first listing by ``seq``: a
one-letter prefix per resource (``s`` schedules, ``w`` webhooks, ``c`` bulk operations)
and the last shown row's ``seq``. Its :attr:`~SeqCursor.pattern` is the query parameter's
pattern, so every well-formed cursor is valid.

A job search walks one of two keysets (:func:`~atlas_jobs._app.db.reads.walks_by_id`),
and its cursor (:class:`JobCursor`) says which: ``c<seq>`` for one owner's jobs
(``ix_jobs_owner_seq``), ``i<32 hex digits of the id>`` across owners (``pk_jobs``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from atlas_jobs._app.db.pages import fetch_size as fetch_size
from atlas_jobs._app.db.reads import JobFilter, walks_by_id
from atlas_jobs._app.db.records import JobRow

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


SCHEDULE_CURSOR = SeqCursor("s")
WEBHOOK_CURSOR = SeqCursor("w")
BULK_OPERATION_CURSOR = SeqCursor("c")


class CursorMismatchError(ValueError):
    """A well-formed job cursor of the other walk than the search's: it came from a
    search with other filters (or of another scope), and cannot continue this one."""


@dataclass(frozen=True, slots=True)
class JobCursor:
    """The cursor of a job search, newest first: ``c<seq>`` continues one owner's walk
    by ``(owner, seq)``, ``i<id hex>`` a walk across owners by ``id``. Both stay opaque
    to clients (``next_cursor`` is passed back as it is).

    A ``c<seq>`` cursor issued before searches across owners walked by id keeps working
    for one owner's search (the format is unchanged); for a search across owners it is
    refused (:class:`CursorMismatchError`, a 422 naming ``cursor``): there is no index on
    ``seq`` alone to continue it, and the client starts again from the first page."""

    by_seq: str = "c"
    by_id: str = "i"

    @property
    def pattern(self) -> str:
        return rf"^({self.by_seq}[0-9]{{1,18}}|{self.by_id}[0-9a-f]{{32}})$"

    def apply(self, page: JobFilter, cursor: str | None) -> JobFilter:
        """``page`` continued after ``cursor`` (the pattern has validated its form);
        :class:`CursorMismatchError` when it is the other walk's cursor."""
        if cursor is None:
            return page
        by_id = walks_by_id(page)
        if cursor.startswith(self.by_id) != by_id:
            raise CursorMismatchError(
                "cursor belongs to a search with other filters; start from the first page"
            )
        if by_id:
            return replace(page, before_id=uuid.UUID(hex=cursor[len(self.by_id) :]))
        return replace(page, before_seq=int(cursor[len(self.by_seq) :]))

    def after(self, page: JobFilter, found: Page[JobRow]) -> str | None:
        """The cursor of the page after ``found`` (rows of ``page``), or ``None`` on the
        last page."""
        last = found.last
        if last is None:
            return None
        return f"{self.by_id}{last.id.hex}" if walks_by_id(page) else f"{self.by_seq}{last.seq}"


JOB_CURSOR = JobCursor()
