"""Typed records of job rows, built where a statement's rows are read.

The worker and the transition service pass these instead of untyped result rows: the
fields a caller reads are declared, and a column a statement stops returning fails
where the row is read, not deep inside a worker.

:class:`JobRow` types a row of ``jobs`` as it is (no copy): the read functions that
answer job rows convert them ONCE, with :func:`job_row` (a ``cast``: nothing happens at
run time), and everything past them reads declared, typed columns.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import Row


class JobRow(Protocol):
    """A row of ``jobs`` as the code reads it: the columns of
    :data:`~atlas_jobs._app.db.schema.jobs` that some reader of a job row reads, typed as
    asyncpg answers them (``jsonb``: decoded documents; ``NULL``: ``None``).

    The result rows themselves (SQLAlchemy ``Row``) are passed, typed by
    :func:`job_row`. The type checker would take an untyped ``Row`` for this protocol
    unconverted (its ``__getattr__`` answers ``Any``): the conversion names the
    boundary, it is not enforced -- a new read of job rows converts its rows too. Not every
    statement answers every column: the status read (``reads.get_job_now``) and the
    creation statements answer the status columns
    (:data:`~atlas_jobs._app.db.schema.JOB_STATUS_COLUMNS`) only, and a brief move
    (``full_rows=False``, :meth:`~atlas_jobs._app.db.moves.Executor.apply`) only id,
    state, version, kind, ``created_at`` and ``finished_at``. The rows carry more than
    this declares (``observed_at``, the database time of the read, which readers take
    with ``getattr``; a move's ``moved_from``): read only at the boundary.
    """

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def seq(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def kind_version(self) -> int: ...
    @property
    def input(self) -> dict[str, Any]: ...
    @property
    def state(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def available_at(self) -> datetime: ...
    @property
    def attempt(self) -> int: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def max_elapsed_seconds(self) -> int: ...
    @property
    def current_attempt_id(self) -> uuid.UUID | None: ...
    @property
    def lease_expires_at(self) -> datetime | None: ...
    @property
    def heartbeat_at(self) -> datetime | None: ...
    @property
    def last_error(self) -> dict[str, Any] | None: ...
    @property
    def error(self) -> dict[str, Any] | None: ...
    @property
    def cancel(self) -> dict[str, Any] | None: ...
    @property
    def wait_deadline_at(self) -> datetime | None: ...
    @property
    def wait_on_deadline(self) -> str | None: ...
    @property
    def plan_revision(self) -> int: ...
    @property
    def current_stage(self) -> str | None: ...
    @property
    def delivery_state(self) -> str: ...
    @property
    def delivery_expires_at(self) -> datetime | None: ...
    @property
    def result_ref(self) -> dict[str, Any] | None: ...
    @property
    def result_files(self) -> int | None: ...
    @property
    def result_destination(self) -> str | None: ...
    @property
    def replay_of(self) -> uuid.UUID | None: ...
    @property
    def run_at(self) -> datetime | None: ...
    @property
    def start_by(self) -> datetime | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def concurrency_key(self) -> str: ...
    @property
    def concurrency_limit(self) -> int | None: ...
    @property
    def concurrency_rate(self) -> int | None: ...
    @property
    def concurrency_period_seconds(self) -> float | None: ...
    @property
    def tags(self) -> list[str]: ...


class RefusedJobRow(JobRow, Protocol):
    """A job row as the refusal read of a move answers it (``moves._REFUSALS``): the
    whole row and the facts its refusal is classified by (the guards' columns, read by
    name)."""

    @property
    def lease_live(self) -> bool: ...


def job_row(row: Row[Any]) -> JobRow:
    """``row``, a row of ``jobs`` (with whatever columns its statement adds), typed as
    one: a ``cast``, no copy."""
    return cast("JobRow", row)


def maybe_job_row(row: Row[Any] | None) -> JobRow | None:
    """:func:`job_row` of a row that may be missing."""
    return cast("JobRow | None", row)


def job_rows(rows: list[Row[Any]]) -> list[JobRow]:
    """:func:`job_row` of each row: the list itself, typed (no copy)."""
    return cast("list[JobRow]", rows)


def refused_job_row(row: Row[Any]) -> RefusedJobRow:
    """A row of a move's refusal read, typed: a ``cast``, no copy."""
    return cast("RefusedJobRow", row)


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """The facts of one claimed attempt, taken from the claim's ``RETURNING`` row."""

    job_id: uuid.UUID
    attempt_id: uuid.UUID
    attempt: int
    charged_attempts: int
    max_attempts: int
    max_elapsed_seconds: float
    kind: str
    kind_version: int
    owner: str
    input: Mapping[str, Any]

    @classmethod
    def from_row(cls, row: Row[Any]) -> ClaimedJob:
        """From a whole job row (``RETURNING j.*``)."""
        return cls(
            job_id=row.id,
            attempt_id=row.current_attempt_id,
            attempt=row.attempt,
            charged_attempts=row.charged_attempts,
            max_attempts=row.max_attempts,
            max_elapsed_seconds=float(row.max_elapsed_seconds),
            kind=row.kind,
            kind_version=row.kind_version,
            owner=row.owner,
            input=row.input,
        )

    @classmethod
    def from_claim(cls, values: Sequence[Any]) -> ClaimedJob:
        """From a row of :data:`~atlas_jobs._app.db.queries.CLAIM_TO_RUN` (the driver's
        record, :mod:`atlas_jobs._app.db.driver`), read by position: its first ten
        columns are these fields in this order (the claim's hot path;
        ``tests/workers/test_claiming.py`` pins the order)."""
        return cls(
            job_id=values[0],
            attempt_id=values[1],
            attempt=values[2],
            charged_attempts=values[3],
            max_attempts=values[4],
            max_elapsed_seconds=float(values[5]),
            kind=values[6],
            kind_version=values[7],
            owner=values[8],
            input=values[9],
        )


@dataclass(frozen=True, slots=True)
class LeaseFacts:
    """A locked job whose lease a rescue judges, with its retry budget on database time
    (:data:`~atlas_jobs._app.db.queries.EXPIRED_LEASES`,
    :data:`~atlas_jobs._app.db.queries.LEASE_FACTS`)."""

    id: uuid.UUID
    state: str
    kind: str
    attempt: int
    charged_attempts: int
    max_attempts: int
    max_elapsed_seconds: int
    elapsed_seconds: float

    @classmethod
    def from_row(cls, row: Row[Any]) -> LeaseFacts:
        return cls(
            id=row.id,
            state=row.state,
            kind=row.kind,
            attempt=row.attempt,
            charged_attempts=row.charged_attempts,
            max_attempts=row.max_attempts,
            max_elapsed_seconds=row.max_elapsed_seconds,
            elapsed_seconds=row.elapsed_seconds,
        )
