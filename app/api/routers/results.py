"""Results: the reference (``GET /v1/jobs/{id}/result``) and signed downloads.

A result is served only when delivery is ``available``: partial or staged files are
never downloadable. Each file gets its own signed URL bound to the job, its owner and
the file name; the download route needs no API key (the token is the credential) and
re-checks the delivery state, so an expired result answers 410 even with a valid URL.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from fastapi.responses import FileResponse, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from atlas_jobs._app.api.deps import CurrentPrincipal, StateDep, bind_job
from atlas_jobs._app.api.responses import problems, public_problems
from atlas_jobs._app.services.access import visible_owner
from atlas_jobs._app.services.results import download_grant, open_download, read_result
from atlas_jobs._app.services.schemas import ResultPublic

router = APIRouter(prefix="/v1", tags=["results"])


@router.get(
    "/jobs/{job_id}/result",
    name="get",
    response_model=ResultPublic,
    summary="Read a job's result reference",
    responses=problems(404, 409, 410, 422),
)
async def get_result(job_id: uuid.UUID, state: StateDep, principal: CurrentPrincipal) -> Any:
    """200 only when delivery is ``available``; 409 names state and delivery otherwise.
    The reference is the kind's: signed URLs of the published files, and for a kind that
    publishes outside the service (`document.publish`) the destination, the operation
    id and the destination's receipt (`publication`)."""
    bind_job(job_id)
    return await read_result(
        state.engine,
        job_id,
        owner=visible_owner(principal),
        clock=state.clock,
        signer=state.signer,
        key_id=principal.key_id,
        # The base URL is the configured one, never the request's Host header.
        base_url=state.settings.public_base_url,
    )


@router.get(
    "/downloads/{token}",
    name="download",
    summary="Download one result file (signed URL; no API key)",
    response_class=FileResponse,
    responses={
        200: {
            "description": "The file's bytes.",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        },
        **public_problems(
            403,
            410,
            422,
            descriptions={
                403: "The download link's signature is bad, or the link expired: read the "
                "result again for a fresh one.",
                410: "Gone: the result's retention passed, or the key that asked for the "
                "link was revoked.",
            },
        ),
    },
)
async def download(token: Annotated[str, Path(max_length=1024)], state: StateDep) -> Response:
    grant = download_grant(state.signer, token)
    bind_job(grant.job_id)
    found = await open_download(state.engine, state.store, grant, clock=state.clock)
    headers = {"Cache-Control": "private, no-store"}
    if found.path is not None:
        return FileResponse(
            found.path, media_type="application/octet-stream", filename=grant.name, headers=headers
        )
    assert found.chunks is not None
    return StreamingResponse(
        iterate_in_threadpool(found.chunks()),
        media_type="application/octet-stream",
        headers={
            **headers,
            "Content-Length": str(found.size),
            "Content-Disposition": f'attachment; filename="{grant.name}"',
        },
    )
