"""Typed records of job rows, built where a statement's rows are read.

The worker and the transition service pass these instead of untyped result rows: the
fields a caller reads are declared, and a column a statement stops returning fails
where the row is read, not deep inside a worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Row


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
    def from_claim(cls, row: Row[Any]) -> ClaimedJob:
        """From a row of :data:`~atlas_jobs._app.db.queries.CLAIM_TO_RUN`, read by
        position: its first ten columns are these fields in this order (the claim's hot
        path; ``tests/workers/test_claiming.py`` pins the order)."""
        values = cast("tuple[Any, ...]", row)  # a Row is a sequence of its columns
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
