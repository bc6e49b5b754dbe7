"""A job as the status page shows it: its status and the last of its history read
together, and a cancel answered with the same (the winner's, when the cancel lost)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.db.engine import one_snapshot
from atlas_jobs._app.db.records import JobRow
from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._app.services.actions import settled
from atlas_jobs._app.services.reading import public_status
from atlas_jobs._app.services.refusals import JobNotFound, MoveRefused
from atlas_jobs._app.services.schemas import HistoryItem, JobPublic, ResultFile
from atlas_jobs._app.services.views import (
    effective_delivery,
    history_item,
    result_files,
    result_publication,
)
from atlas_jobs._app.signing import DownloadSigner
from atlas_jobs._app.transitions import Actor, Transitions


@dataclass(frozen=True, slots=True)
class JobPage:
    """The job row, its status, its last history items (oldest first), and the refusal
    of the action asked on the page, if it was refused (then the status is the
    winner's)."""

    job: JobRow
    status: JobPublic
    history: list[HistoryItem]
    refused: MoveRefused | None = None


@dataclass(frozen=True, slots=True)
class ShownDetails:
    """What a job's page shows beside its status: the result's download links and where
    it was published (both only while the result is available), and the job's input
    (its owner's eyes only)."""

    files: list[ResultFile]
    publication: dict[str, Any] | None
    job_input: Any | None


def shown_details(
    job: JobRow, signer: DownloadSigner, *, key_id: uuid.UUID, owner: str
) -> ShownDetails:
    """The details of ``job`` the viewer (key ``key_id`` of ``owner``) may see: signed
    links exactly when ``GET /v1/jobs/{id}/result`` would give them (relative URLs, so
    the browser stays on the origin that served the page), the publication of an
    available result, and the input only to the job's owner (an operator looking at
    another owner's job does not see it)."""
    available = effective_delivery(job) == DeliveryState.AVAILABLE
    publication = result_publication(job) if available else None
    return ShownDetails(
        files=result_files(job, signer, key_id, "") if available else [],
        publication=None if publication is None else publication.model_dump(mode="json"),
        job_input=job.input if job.owner == owner else None,
    )


async def _history(conn: AsyncConnection, job_id: uuid.UUID, limit: int) -> list[HistoryItem]:
    return [history_item(row) for row in await reads.history_tail(conn, job_id, limit=limit)]


async def read_job_page(
    engine: AsyncEngine, job_id: uuid.UUID, *, owner: str | None, clock: Clock, history: int
) -> JobPage:
    """The status and the last ``history`` items from one snapshot (they agree)."""
    async with one_snapshot(engine) as conn:
        job = await reads.get_job(conn, job_id, owner=owner, now=clock.now())
        if job is None:
            raise JobNotFound()
        status = await public_status(conn, job)
        return JobPage(job, status, await _history(conn, job_id, history))


async def cancel_from_page(
    engine: AsyncEngine,
    transitions: Transitions,
    job_id: uuid.UUID,
    *,
    actor: Actor,
    owner: str | None,
    request_id: str | None,
    history: int,
) -> JobPage:
    """Cancel, answered with the status and last ``history`` items in the cancel's
    transaction; a cancel that lost is recorded and answered with the winner."""
    async with engine.begin() as conn:
        outcome = await transitions.request_cancel(
            conn, job_id, actor=actor, owner=owner, request_id=request_id
        )
        found = await settled(conn, outcome)
        if isinstance(found, MoveRefused):
            if found.public is None or found.job is None:
                raise JobNotFound()
            return JobPage(
                found.job, found.public, await _history(conn, job_id, history), refused=found
            )
        return JobPage(found.job, found.public, await _history(conn, job_id, history))
