"""Reading a job's result reference: only while its delivery is ``available``."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._app.services.reading import read_status_once
from atlas_jobs._app.services.refusals import ResultExpired, ResultNotReady
from atlas_jobs._app.services.schemas import DeliveryPublic, ResultPublic
from atlas_jobs._app.services.views import result_files, result_publication
from atlas_jobs._app.signing import DownloadSigner


async def read_result(
    engine: AsyncEngine,
    job_id: uuid.UUID,
    *,
    owner: str | None,
    clock: Clock,
    signer: DownloadSigner,
    key_id: uuid.UUID,
    base_url: str,
) -> ResultPublic:
    """The result reference: signed URLs of the published files (for the key
    ``key_id``, under ``base_url``) and the kind's reference and publication; refused
    while the delivery is not ``available`` (:class:`ResultExpired` once retention
    passed)."""
    job, public = await read_status_once(engine, job_id, owner=owner, clock=clock)
    delivery = public.delivery.state
    if delivery == DeliveryState.EXPIRED:
        raise ResultExpired(public.state.value, delivery.value)
    if delivery != DeliveryState.AVAILABLE:
        raise ResultNotReady(public.state.value, delivery.value)
    return ResultPublic(
        job_id=job.id,
        delivery=DeliveryPublic(state=delivery, expires_at=job.delivery_expires_at),
        files=result_files(job, signer, key_id, base_url),
        reference={k: v for k, v in (job.result_ref or {}).items() if k != "files"},
        publication=result_publication(job),
    )
