"""The status page's routes under ``/ui`` (HTML, left out of the OpenAPI document).

Reads go through the same services as the API's routers (``services.reading.list_jobs``
for a page, ``services.job_page`` for one job, scoped by
:func:`~atlas_jobs._app.services.access.visible_owner`), so a page shows what the API
shows the same key. The one write -- Cancel -- runs the cancel transition as
``POST /v1/jobs/{id}/cancel`` does, and its answer comes from the row the move returned
(read on the same transaction's connection).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Final
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from atlas_jobs._app.api.deps import StateDep, request_id
from atlas_jobs._app.api.errors import ApiError, problem_of
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.lifecycle import ALL_STATES, JobState
from atlas_jobs._app.services import ui_sessions
from atlas_jobs._app.services.access import actor_for, listing_owner, visible_owner
from atlas_jobs._app.services.job_page import cancel_from_page, read_job_page, shown_details
from atlas_jobs._app.services.kinds import kinds_view
from atlas_jobs._app.services.paging import JOB_CURSOR, CursorMismatchError
from atlas_jobs._app.services.queue import queue_view
from atlas_jobs._app.services.reading import JobFilter, list_jobs
from atlas_jobs._app.services.refusals import JobNotFound, NotAllowed, Refusal
from atlas_jobs._app.services.schemas import HistoryItem, JobCreateBase, JobPublic
from atlas_jobs._app.services.views import JobRow
from atlas_jobs._app.ui.auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    CodecDep,
    CurrentViewer,
    UiForbiddenError,
    UiNotFoundError,
    Viewer,
    check_csrf,
    check_same_origin,
    viewer_from_cookie,
)
from atlas_jobs._app.ui.rendering import HISTORY_SHOWN, JobView, job_view, label_of, render
from atlas_jobs._app.ui.session import COOKIE_NAME, COOKIE_PATH, new_session
from atlas_jobs._app.ui.submitting import (
    FormInputError,
    input_fields,
    kind_named,
    kinds_offered,
    parse_input,
    starting_input,
)

router = APIRouter(prefix="/ui", include_in_schema=False)

PAGE_SIZE: Final = 25
MAX_FORM_FIELDS: Final = 20
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # Never to another site (pages hold signed download links); same-origin keeps the
    # Origin header on form posts (with no-referrer a browser sends "Origin: null").
    "Referrer-Policy": "same-origin",
}
_CURSOR = re.compile(JOB_CURSOR.pattern)
_STATE_NAMES: Final = frozenset(s.value for s in ALL_STATES)


def html(body: str, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return HTMLResponse(body, status_code=status_code, headers={**PAGE_HEADERS, **(headers or {})})


def is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def page(name: str, viewer: Viewer | None, status_code: int = 200, **ctx: Any) -> Response:
    return html(
        render(name, viewer=viewer, csrf=viewer.session.csrf_token if viewer else "", **ctx),
        status_code,
    )


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the only kind the pages send)."""
    body = await request.body()
    if not body:
        return {}
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise UiForbiddenError("The page's forms send application/x-www-form-urlencoded")
    try:
        pairs = parse_qsl(
            body.decode("utf-8", errors="replace"),
            keep_blank_values=True,
            max_num_fields=MAX_FORM_FIELDS,
        )
    except ValueError:
        raise UiForbiddenError("Too many form fields") from None
    return dict(pairs)


def parse_job_id(value: str) -> uuid.UUID:
    """A malformed id is answered like an unknown one: "not found"."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise UiNotFoundError() from None


_LOCAL_PAGE = re.compile(r"/ui/[A-Za-z0-9._~/?=&%+-]{0,1000}")


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a page of this site (a plain path under ``/ui/``,
    no scheme, host, ``//``, backslash or control character), else the job list."""
    if value and _LOCAL_PAGE.fullmatch(value) and "//" not in value:
        return value
    return "/ui/jobs"


# --- login / logout -------------------------------------------------------------------


@router.get("", name="ui-root")
async def root() -> Response:
    return RedirectResponse("/ui/jobs", status_code=303)


@router.get("/login", name="ui-login-form")
async def login_form(
    target: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    return page("login.html", None, next=safe_next(target), error=None)


@router.post("/login", name="ui-login")
async def login(request: Request, state: StateDep, codec: CodecDep) -> Response:
    check_same_origin(request, state.settings.public_url)
    form = await read_form(request)
    target = safe_next(form.get("next"))
    logged_in = await ui_sessions.log_in(
        state.reads, state.engine, form.get("api_key", ""), ttl_seconds=codec.ttl_seconds
    )
    if logged_in is None:
        return page(
            "login.html",
            None,
            status_code=401,
            next=target,
            error="Unknown or revoked API key.",
        )
    session = new_session(logged_in.token)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE_NAME,
        codec.encode(session),
        max_age=codec.ttl_seconds,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https" or state.settings.ui_cookie_secure,
    )
    response.headers.update(PAGE_HEADERS)
    return response


@router.post("/logout", name="ui-logout")
async def logout(request: Request, state: StateDep, codec: CodecDep) -> Response:
    check_same_origin(request, state.settings.public_url)
    form = await read_form(request)
    viewer = await viewer_from_cookie(request, state, codec)
    if viewer is not None:
        check_csrf(viewer, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD))
        await ui_sessions.log_out(state.engine, viewer.session.token)  # the cookie is dead now
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE_NAME, path=COOKIE_PATH, httponly=True, samesite="strict")
    return response


# --- the job list ---------------------------------------------------------------------


async def _listing(
    state: ApiState,
    viewer: Viewer,
    states: Sequence[str],
    kinds: Sequence[str],
    owner: str | None,
    cursor: str | None,
) -> dict[str, Any]:
    unknown = sorted(set(states) - _STATE_NAMES)
    if unknown:
        raise UiBadFilterError(f"Unknown state {unknown[0]!r}")
    if cursor is not None and not _CURSOR.fullmatch(cursor):
        raise UiBadFilterError("Malformed page cursor")
    if any(len(k) > 200 for k in kinds) or len(kinds) > 20:
        raise UiBadFilterError("Too many or too long kind filters")
    try:
        wanted_owner = listing_owner(viewer.principal, owner)
    except NotAllowed as refused:
        raise UiForbiddenError(refused.detail) from None
    query = JobFilter(
        owner=wanted_owner,
        states=list(states),
        kinds=[k for k in kinds if k],
        limit=PAGE_SIZE,
    )
    try:
        query = JOB_CURSOR.apply(query, cursor)
    except CursorMismatchError:
        raise UiBadFilterError("Malformed page cursor") from None
    listing = await list_jobs(state.reads, query, clock=state.clock)
    filters: list[tuple[str, str]] = [("state", s) for s in states]
    filters += [("kind", k) for k in query.kinds]
    if wanted_owner != viewer.principal.owner:
        filters.append(("owner", wanted_owner))
    return {
        "items": [(s, label_of(s)[0]) for s in listing.statuses],
        "owner": wanted_owner,
        "states": list(states),
        "kinds": query.kinds,
        "all_states": [s.value for s in ALL_STATES],
        "query": urlencode(filters + ([("cursor", cursor)] if cursor else [])),
        "next_query": (
            urlencode([*filters, ("cursor", listing.next_cursor)]) if listing.next_cursor else None
        ),
        "first_query": urlencode(filters),
        "paged": cursor is not None,
    }


class UiBadFilterError(UiForbiddenError):
    """A filter the list cannot apply (answered 422 with the reason)."""


StateFilter = Annotated[list[str], Query(alias="state")]
KindFilter = Annotated[list[str], Query(alias="kind")]


@router.get("/jobs", name="ui-jobs")
async def jobs_page(
    state: StateDep,
    viewer: CurrentViewer,
    states: StateFilter = [],  # noqa: B006 - FastAPI copies the default
    kinds: KindFilter = [],  # noqa: B006
    owner: str | None = None,
    cursor: str | None = None,
) -> Response:
    listing = await _listing(state, viewer, states, kinds, owner, cursor)
    return page("jobs.html", viewer, **listing)


@router.get("/jobs/table", name="ui-jobs-table")
async def jobs_table(
    state: StateDep,
    viewer: CurrentViewer,
    states: StateFilter = [],  # noqa: B006
    kinds: KindFilter = [],  # noqa: B006
    owner: str | None = None,
    cursor: str | None = None,
) -> Response:
    listing = await _listing(state, viewer, states, kinds, owner, cursor)
    return page("jobs_table.html", viewer, **listing)


# --- one job --------------------------------------------------------------------------


def view_of(
    state: ApiState,
    job: JobRow,
    status: JobPublic,
    history: Sequence[HistoryItem],
    viewer: Viewer,
    *,
    notice: str | None = None,
) -> JobView:
    """The job page's view of a full job row: its download links and publication, and
    its input for its owner only (an operator looking at another owner's job does not
    see it)."""
    shown = shown_details(
        job, state.signer, key_id=viewer.principal.key_id, owner=viewer.principal.owner
    )
    return job_view(
        status,
        history,
        shown.files,
        viewer,
        notice=notice,
        publication=shown.publication,
        job_input=shown.job_input,
    )


async def read_view(state: ApiState, job_id: uuid.UUID, viewer: Viewer) -> JobView:
    try:
        found = await read_job_page(
            state.engine,
            job_id,
            owner=visible_owner(viewer.principal),
            clock=state.clock,
            history=HISTORY_SHOWN,
        )
    except JobNotFound:
        raise UiNotFoundError() from None
    return view_of(state, found.job, found.status, found.history, viewer)


@router.get("/jobs/{job_id}", name="ui-job")
async def job_page(job_id: str, state: StateDep, viewer: CurrentViewer) -> Response:
    view = await read_view(state, parse_job_id(job_id), viewer)
    return page("job.html", viewer, view=view)


@router.get("/jobs/{job_id}/panel", name="ui-job-panel")
async def job_panel(job_id: str, state: StateDep, viewer: CurrentViewer) -> Response:
    view = await read_view(state, parse_job_id(job_id), viewer)
    return page("panel.html", viewer, view=view)


@router.post("/jobs/{job_id}/cancel", name="ui-job-cancel")
async def cancel(job_id: str, request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    check_same_origin(request, state.settings.public_url)
    form = await read_form(request)
    check_csrf(viewer, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD))
    job_uuid = parse_job_id(job_id)
    principal = viewer.principal
    try:
        found = await cancel_from_page(
            state.engine,
            state.transitions,
            job_uuid,
            actor=actor_for(principal),
            owner=visible_owner(principal),
            request_id=request_id(),
            history=HISTORY_SHOWN,
        )
    except JobNotFound:
        raise UiNotFoundError() from None
    # A cancel that lost is recorded; the page shows the winner and why.
    notice = problem_of(found.refused).detail if found.refused is not None else None
    if not is_htmx(request):  # a plain form post: back to the page (post/redirect/get)
        return RedirectResponse(f"/ui/jobs/{job_uuid}", status_code=303)
    view = view_of(state, found.job, found.status, found.history, viewer, notice=notice)
    return page("panel.html", viewer, view=view)


@router.get("/kinds", name="ui-kinds")
async def kinds_page(state: StateDep, viewer: CurrentViewer) -> Response:
    """Every kind, its versions and the live workers serving each (GET /v1/kinds)."""
    view = await kinds_view(
        state.engine,
        state.clock,
        state.live_workers,
        window_seconds=state.settings.worker_live_window_seconds,
    )
    return page("kinds.html", viewer, kinds=view)


# --- operators ------------------------------------------------------------------------


@router.get("/queue", name="ui-queue")
async def queue_page(state: StateDep, viewer: CurrentViewer) -> Response:
    if not viewer.is_operator:
        raise UiForbiddenError("The queue view needs the operator role")
    view = await queue_view(state.engine, state.clock)
    return page("queue.html", viewer, queue=view, states=[s.value for s in JobState])


# --- submitting a job -----------------------------------------------------------------


def _submit_page(
    viewer: Viewer,
    kind: str | None,
    input_text: str | None,
    *,
    status_code: int = 200,
    problem: ApiError | FormInputError | None = None,
) -> Response:
    offered = kinds_offered()
    spec = kind_named(kind) or (offered[0] if offered else None)
    starting = starting_input(spec) if spec else "{}"
    issues: list[str] = []
    title = None
    if isinstance(problem, ApiError):
        title = problem.detail
        for issue in problem.extensions.get("errors") or []:
            where = ".".join(str(p) for p in issue.get("loc", ()) if p not in {"body"})
            issues.append(f"{where}: {issue.get('msg')}" if where else str(issue.get("msg")))
    elif problem is not None:
        title = str(problem)
    return page(
        "submit.html",
        viewer,
        status_code=status_code,
        kinds=offered,
        spec=spec,
        fields=input_fields(spec) if spec else [],
        input_text=starting if input_text is None else input_text,
        problem_title=title,
        problem_issues=issues,
    )


@router.get("/submit", name="ui-submit-form")
async def submit_form(viewer: CurrentViewer, kind: str | None = None) -> Response:
    """A form for one job of a kind: its input as JSON, the input schema's fields beside it."""
    return _submit_page(viewer, kind, None)


@router.post("/submit", name="ui-submit")
async def submit(request: Request, state: StateDep, viewer: CurrentViewer) -> Response:
    """Create the job as ``POST /v1/jobs`` does; a refused input is shown on the form (422
    with the API's problem: each ``field: message``); created: to the job's page."""
    check_same_origin(request, state.settings.public_url)
    form = await read_form(request)
    check_csrf(viewer, request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD))
    kind, text = form.get("kind", ""), form.get("input", "")
    try:
        raw = parse_input(text)
    except FormInputError as refused:
        return _submit_page(viewer, kind, text, status_code=422, problem=refused)
    body = JobCreateBase.model_construct(kind=kind, input=raw, notify=None)
    created = await state.creation.create_one(
        viewer.principal, body, idempotency_key=None, request_id=request_id()
    )
    if isinstance(created, Refusal):
        problem = problem_of(created)
        return _submit_page(viewer, kind, text, status_code=problem.status, problem=problem)
    state.metrics.count_created(created.job.kind)
    return RedirectResponse(f"/ui/jobs/{created.job.id}", status_code=303)
