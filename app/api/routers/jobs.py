"""``/v1/jobs``: create (one, or a batch at ``/v1/jobs:batch``), read (with ETag and
``Prefer: wait``), list, cancel, reschedule, history."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response, status
from pydantic.json_schema import SkipJsonSchema

from atlas_jobs._app.api.answers import respond, status_headers, status_response
from atlas_jobs._app.api.deps import (
    CurrentPrincipal,
    EngineDep,
    NoNullBody,
    StateDep,
    api_state,
    bind_job,
    request_id,
)
from atlas_jobs._app.api.header_params import (
    IDEMPOTENCY_KEY,
    IF_NONE_MATCH,
    PREFER,
    documented,
    prefer_wait,
)
from atlas_jobs._app.api.longpoll import unless_client_leaves
from atlas_jobs._app.api.middleware import CLIENT_CLOSED_STATUS
from atlas_jobs._app.api.responses import CREATION_PROBLEMS, headers, problems
from atlas_jobs._app.api.search_schemas import JobListQuery
from atlas_jobs._app.services import actions
from atlas_jobs._app.services.access import (
    actor_for,
    check_owner_filter,
    search_scope,
    visible_owner,
)
from atlas_jobs._app.services.held_reads import held_status
from atlas_jobs._app.services.reading import job_history, read_status_unless_current
from atlas_jobs._app.services.reading import list_jobs as list_job_statuses
from atlas_jobs._app.services.refusals import Refusal
from atlas_jobs._app.services.schemas import (
    CancelCreate,
    HistoryPage,
    JobBatchCreate,
    JobBatchItemPublic,
    JobBatchPublic,
    JobCreate,
    JobPage,
    JobPublic,
    RescheduleCreate,
)
from atlas_jobs._app.services.views import (
    etag_matches,
    job_path,
    waiting_tag,
)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
batch_router = APIRouter(prefix="/v1", tags=["jobs"])
"""``/v1/jobs:batch`` has no ``/`` after ``jobs``: it never reaches ``/v1/jobs/{job_id}``."""

MAX_SEQ = 2**63 - 1  # history seq is a bigint
MAX_HISTORY_PAGE = 1000


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    summary="Create a job",
    responses={
        202: {
            "description": "Accepted and durable. Poll the Location.",
            "headers": headers("Location", "Retry-After", "ETag", "Idempotency-Replayed"),
        },
        **CREATION_PROBLEMS,
    },
    openapi_extra=documented(IDEMPOTENCY_KEY),
)
async def create(body: JobCreate, request: Request, principal: CurrentPrincipal) -> Any:
    """Accept a job. The 202 is sent only after the job row is committed."""
    state = api_state(request)
    created = await state.creation.create_one(
        principal, body, idempotency_key=IDEMPOTENCY_KEY.read(request), request_id=request_id()
    )
    if isinstance(created, Refusal):
        raise created
    bind_job(created.job.id)
    found = status_headers(created.job, public=created.status)
    found["Location"] = job_path(created.job.id)
    if created.replayed:
        found["Idempotency-Replayed"] = "true"
    else:
        state.metrics.count_created(created.job.kind)
    return status_response(created.status, found, status_code=status.HTTP_202_ACCEPTED)


@batch_router.post(
    "/jobs:batch",
    name="batch",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobBatchPublic,
    summary="Create many jobs atomically",
    responses={
        202: {"description": "Every job accepted and durable, in request order."},
        **CREATION_PROBLEMS,
    },
)
async def create_many(
    body: JobBatchCreate, state: StateDep, principal: CurrentPrincipal
) -> JobBatchPublic:
    """Create up to ``ATLAS_BATCH_MAX_JOBS`` jobs (default 100) in one transaction: all
    of them or none. Each item is validated like ``POST /v1/jobs`` (a 422 names the
    item: ``body.jobs.3.input.pages``) and may carry its own ``idempotency_key`` with the
    header's semantics: the same key and body give the existing job (``replayed``:
    true); a key used with another body is 422 and one held by a request in flight is
    409, for the whole batch. Admission counts every new job of the batch. Each item's
    ``links.self`` is its Location."""
    created = await state.creation.create_batch(principal, body.jobs, request_id=request_id())
    if isinstance(created, Refusal):
        raise created
    items = [
        JobBatchItemPublic.model_validate({**dict(c.status), "replayed": c.replayed})
        for c in created
    ]
    for c in created:
        if not c.replayed:
            state.metrics.count_created(c.job.kind)
    return JobBatchPublic(items=items)


@router.get(
    "",
    name="list",
    response_model=JobPage,
    summary="Search jobs",
    responses=problems(403, 422),
)
async def list_jobs(
    api: StateDep,
    principal: CurrentPrincipal,
    query: Annotated[JobListQuery, Query()],
) -> JobPage:
    """Newest first, keyset pagination (stable under concurrent inserts: a page never
    repeats or skips a job because newer ones arrived). Operators search every owner's
    jobs (reviewers too with the global review scope); other keys their own. Each filter
    field may repeat (`state=unresolved&state=failed`); an unknown field, or a range whose
    end is not after its start, is 422."""
    scope = search_scope(principal, review_scope=api.settings.review_scope)
    check_owner_filter(query.owner, scope)
    page = query.page(scope=scope)
    listing = await list_job_statuses(api.reads, page, clock=api.clock)
    return JobPage(items=listing.statuses, next_cursor=listing.next_cursor)


@router.get(
    "/{job_id}",
    response_model=JobPublic,
    summary="Read a job's status",
    responses={
        200: {
            "description": "The status (a successful read, not job success).",
            "headers": headers("ETag", "Retry-After", "Vary", "Preference-Applied"),
        },
        304: {
            "description": "Not Modified: the status is still the one whose ETag was sent "
            "in If-None-Match (no body; keep the status you have). A successful read.",
            "headers": headers("ETag", "Retry-After", "Vary", "Preference-Applied"),
        },
        **problems(404, 422, 429, 503),
    },
    openapi_extra=documented(IF_NONE_MATCH, PREFER),
)
async def get(job_id: uuid.UUID, principal: CurrentPrincipal, request: Request) -> Any:
    state = api_state(request)
    bind_job(job_id)
    if_none_match = IF_NONE_MATCH.read(request)
    wait = prefer_wait(PREFER.read(request), state.settings.max_wait_seconds)
    if wait is None:  # a plain read: straight from the database
        job, public = await read_status_unless_current(
            state.reads,
            job_id,
            owner=visible_owner(principal),
            clock=state.clock,
            if_none_match=if_none_match,
        )
        found = status_headers(job, public=public)
    else:  # a held read: from the job's shared feed
        held = await unless_client_leaves(
            request.receive,
            held_status(state.feeds, job_id, principal, wait=wait, if_none_match=if_none_match),
        )
        if held is None:  # the client left: its slot is free; nobody reads an answer
            return Response(status_code=CLIENT_CLOSED_STATUS)
        job, public = held.job, held.status
        found = status_headers(job, now=held.now, public=public)
    found["Vary"] = "Prefer"
    if wait is not None:
        found["Preference-Applied"] = f"wait={wait}"
    if public is None or etag_matches(if_none_match, job.version, waiting_tag(public.waiting_for)):
        # (a plain read leaves the body unbuilt exactly when the ETag matches)
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=found)
    return status_response(public, found)


@router.post(
    "/{job_id}/cancel",
    dependencies=[NoNullBody],
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    summary="Request cancellation",
    responses={
        202: {
            "description": "cancel_requested, or canceled when nothing was running; a "
            "repeat of a cancel that already took effect answers 202 too."
        },
        **problems(
            400,
            404,
            409,
            413,
            415,
            422,
            descriptions={
                409: "The job ended another way (`succeeded`, `failed`): the cancel lost; "
                "`job` in the body shows the winner. Also: an operator decides an "
                "`unresolved` job."
            },
        ),
    },
)
async def cancel(
    job_id: uuid.UUID,
    state: StateDep,
    principal: CurrentPrincipal,
    response: Response,
    body: CancelCreate | SkipJsonSchema[None] = None,
) -> JobPublic:
    """Queued/waiting jobs cancel at once; running ones stop at their next safe point;
    an operator's cancel of unresolved work is an operator decision. A repeat after the
    cancel took effect answers the same way.

    A cancel that loses to a finished job is recorded in the history and answered 409
    with the current state (the winner). An optional ``note`` is recorded with the
    cancel (an operator says why)."""
    bind_job(job_id)
    moved = await actions.cancel(
        state.engine,
        state.transitions,
        job_id,
        actor=actor_for(principal),
        owner=visible_owner(principal),
        request_id=request_id(),
        note=body.note if body else None,
    )
    return respond(moved, response)


@router.post(
    "/{job_id}/reschedule",
    status_code=status.HTTP_200_OK,
    response_model=JobPublic,
    summary="Move or drop a queued job's delay",
    responses=problems(
        400,
        404,
        409,
        413,
        415,
        422,
        descriptions={
            409: "The job is no longer queued (a worker claimed it, or it ended), or it "
            "never started and its `start_by` passed: the body names the state.",
            422: "`run_at` and `delay_seconds` both given, malformed, more than one year "
            "ahead, or not before the job's `start_by`.",
        },
    ),
)
async def reschedule(
    job_id: uuid.UUID,
    body: RescheduleCreate,
    state: StateDep,
    principal: CurrentPrincipal,
    response: Response,
) -> JobPublic:
    """While the job is ``queued``: a new not-before -- ``run_at``, or ``delay_seconds``
    from now -- or, with neither (``{}``), no delay at all (claimable at once). Recorded
    in the history (``reschedule``); the state stays ``queued``. The new not-before
    must be before the job's ``start_by``."""
    bind_job(job_id)
    moved = await actions.reschedule(
        state.engine,
        state.transitions,
        job_id,
        body,
        clock=state.clock,
        actor=actor_for(principal),
        owner=visible_owner(principal),
        request_id=request_id(),
    )
    return respond(moved, response)


@router.get(
    "/{job_id}/history",
    response_model=HistoryPage,
    summary="Read a job's history",
    responses=problems(404, 422),
)
async def history(
    job_id: uuid.UUID,
    engine: EngineDep,
    principal: CurrentPrincipal,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Only items with seq > after.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY_PAGE, description="Items per page.")] = (
        MAX_HISTORY_PAGE
    ),
) -> HistoryPage:
    """Recorded transitions, oldest first (``seq`` is the SSE event id too), a page at a
    time: ``next_after`` is set while more follow."""
    bind_job(job_id)
    items, next_after = await job_history(
        engine, job_id, owner=visible_owner(principal), after=after, limit=limit
    )
    return HistoryPage(job_id=job_id, items=items, next_after=next_after)
