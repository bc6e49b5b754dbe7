"""What a live feed holds of one job, and the one read that refreshes it.

A :class:`Snapshot` is the job row (with ``observed_at``, the database time of the
read), its stages, its status body and the last :data:`HISTORY_KEPT` history rows. A
refresh (:func:`read_snapshot`) reads the job, its stages (only when it has a plan) and
the history after the previous snapshot's last seq, on one connection.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.services.schemas import JobPublic
from atlas_jobs._app.services.views import job_status

HISTORY_KEPT = 1000
"""History rows a feed keeps; an event stream resuming before them reads the rest itself."""
HISTORY_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One read of a job, shared by every watcher of it. ``serial`` grows by one per
    refresh; every history row with ``seq > history_floor`` is in ``history``."""

    serial: int
    job: JobRow | None
    stages: tuple[Row[Any], ...]
    status: JobPublic | None
    history: tuple[Row[Any], ...]
    history_floor: int
    read_at: float  # time.monotonic() when the read finished

    @property
    def last_seq(self) -> int:
        return self.history[-1].seq if self.history else self.history_floor

    def visible_to(self, owner: str | None) -> JobRow | None:
        """The job row when ``owner`` may see it (``None``: an operator sees all)."""
        if self.job is None or (owner is not None and self.job.owner != owner):
            return None
        return self.job

    def history_after(self, seq: int) -> list[Row[Any]]:
        return [row for row in self.history if row.seq > seq]

    def observed_now(self) -> datetime | None:
        """The database time now, as far as this snapshot knows (for ``Retry-After``)."""
        observed: datetime | None = getattr(self.job, "observed_at", None)
        if observed is None:
            return None
        return observed + timedelta(seconds=time.monotonic() - self.read_at)


async def read_snapshot(
    conn: AsyncConnection, job_id: uuid.UUID, clock: Clock, previous: Snapshot | None
) -> Snapshot:
    """The job, its stages and the history it gained since ``previous``, read on
    ``conn`` in one snapshot (the caller's ``REPEATABLE READ`` transaction), so the
    history ends exactly at the transition the job row shows."""
    job = await reads.get_job(conn, job_id, owner=None, now=clock.now())
    stages = tuple(await reads.plan_stages(conn, job)) if job is not None else ()
    if job is None:  # unknown (or deleted): nothing to follow
        history, floor = (previous.history, previous.history_floor) if previous else ((), 0)
        serial = previous.serial + 1 if previous else 1
    elif previous is None:
        tail = await reads.history_tail(conn, job_id, limit=HISTORY_KEPT)
        floor = tail[0].seq - 1 if len(tail) == HISTORY_KEPT else 0
        history, serial = tuple(tail), 1
    else:
        history, floor = await _history_since(conn, job_id, previous)
        serial = previous.serial + 1
    return Snapshot(
        serial=serial,
        job=job,
        stages=stages,
        status=job_status(job, stages) if job is not None else None,
        history=history,
        history_floor=floor,
        read_at=time.monotonic(),
    )


async def _history_since(
    conn: AsyncConnection, job_id: uuid.UUID, previous: Snapshot
) -> tuple[tuple[Row[Any], ...], int]:
    """``previous``'s history plus every row after its last seq, page by page."""
    history, floor = previous.history, previous.history_floor
    seq = previous.last_seq
    while True:
        page = await reads.history(conn, job_id, after_seq=seq, limit=HISTORY_PAGE)
        history, floor = _keep_tail(history, page, floor)
        if len(page) < HISTORY_PAGE:
            return history, floor
        seq = page[-1].seq


def _keep_tail(
    held: tuple[Row[Any], ...], gained: list[Row[Any]], floor: int
) -> tuple[tuple[Row[Any], ...], int]:
    """The last :data:`HISTORY_KEPT` rows, and the seq of the newest row dropped."""
    rows = (*held, *gained)
    if len(rows) <= HISTORY_KEPT:
        return rows, floor
    dropped = rows[: len(rows) - HISTORY_KEPT]
    return rows[len(rows) - HISTORY_KEPT :], dropped[-1].seq
