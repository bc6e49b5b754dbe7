"""Reading a job's result reference, and opening one of its files for a signed
download: both only while its delivery is ``available``."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.clock import Clock
from atlas_jobs._app.db import reads
from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._app.services.reading import read_status_once
from atlas_jobs._app.services.refusals import (
    BadDownloadLink,
    DownloadGone,
    ResultExpired,
    ResultNotReady,
)
from atlas_jobs._app.services.schemas import ResultPublic
from atlas_jobs._app.services.views import effective_delivery, result_files, result_publication
from atlas_jobs._app.signing import (
    DownloadGrant,
    DownloadSigner,
    ExpiredDownloadTokenError,
    InvalidDownloadTokenError,
)
from atlas_jobs._app.storage import PublishedFile, ResultStore


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
        delivery=public.delivery,
        files=result_files(job, signer, key_id, base_url),
        reference={k: v for k, v in (job.result_ref or {}).items() if k != "files"},
        publication=result_publication(job),
    )


def download_grant(signer: DownloadSigner, token: str) -> DownloadGrant:
    """The grant a signed download link carries (the token is the credential: no API
    key); refused (:class:`BadDownloadLink`) when its signature is bad or it expired."""
    try:
        return signer.verify(token)
    except ExpiredDownloadTokenError:
        raise BadDownloadLink("The download link expired; read the result again") from None
    except InvalidDownloadTokenError:
        raise BadDownloadLink() from None


async def open_download(
    engine: AsyncEngine, store: ResultStore, grant: DownloadGrant, *, clock: Clock
) -> PublishedFile:
    """The published file a verified download grant (:func:`download_grant`) names;
    refused (:class:`DownloadGone`) once the delivery is not ``available`` (expired at the
    boundary, withdrawn), the key that asked for the link was revoked, or the file is
    not one of the result's."""
    async with engine.connect() as conn:
        job = await reads.download_job(
            conn, grant.job_id, owner=grant.owner, key_id=grant.key_id, now=clock.now()
        )
    if job is None or effective_delivery(job) != DeliveryState.AVAILABLE:
        raise DownloadGone("The result is no longer available")
    listed = {entry["name"] for entry in (job.result_ref or {}).get("files", [])}
    found = (
        await asyncio.to_thread(store.published_file, grant.owner, grant.job_id, grant.name)
        if grant.name in listed
        else None
    )
    if found is None:
        raise DownloadGone("The file is no longer available")
    return found
