"""Who is looking at the status page, and whether a POST may act for them.

* :func:`current_viewer` -- the session cookie, verified, and its server-side session
  and key checked on every request (a logout, a revoked key or an operator's "log out
  everywhere" ends it at its next click).
* :func:`check_same_origin` -- a POST must come from this site: ``Sec-Fetch-Site`` is
  ``same-origin`` (or ``none``: typed by the user) when the browser sends it, and an
  ``Origin`` header, when sent, names this host. SameSite=Strict already keeps the
  cookie off cross-site requests; this refuses the login form too, which has no session.
* :func:`check_csrf` -- the per-session token (hidden form field ``csrf_token`` or the
  ``X-CSRF-Token`` header htmx sends) must match the session's.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, Request

from atlas_jobs._app.api.deps import StateDep
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.apikeys import Principal
from atlas_jobs._app.services.access import is_operator
from atlas_jobs._app.services.ui_sessions import session_principal
from atlas_jobs._app.signing import load_secret
from atlas_jobs._app.ui.session import COOKIE_NAME, Session, SessionCodec

CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf_token"
_ALLOWED_FETCH_SITES = frozenset({"same-origin", "none"})


class LoginRequiredError(Exception):
    """No valid session: pages redirect to the login form, fragments say so."""


class UiForbiddenError(Exception):
    """The viewer may not do this (a role, or a POST that is not provably ours)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class UiNotFoundError(Exception):
    """Unknown job, another owner's job, or a malformed id: one answer for all three."""


@dataclass(frozen=True, slots=True)
class Viewer:
    """The authenticated principal behind a browser session, and that session."""

    principal: Principal
    session: Session

    @property
    def is_operator(self) -> bool:
        return is_operator(self.principal)


def session_codec(request: Request, state: StateDep) -> SessionCodec:
    """The codec, built once per app from the service's signing secret."""
    codec: SessionCodec | None = getattr(request.app.state, "ui_sessions", None)
    if codec is None:
        codec = SessionCodec(
            load_secret(state.settings), ttl_seconds=state.settings.ui_session_ttl_seconds
        )
        request.app.state.ui_sessions = codec
    return codec


CodecDep = Annotated[SessionCodec, Depends(session_codec)]


async def viewer_from_cookie(
    request: Request, state: ApiState, codec: SessionCodec
) -> Viewer | None:
    session = codec.decode(request.cookies.get(COOKIE_NAME))
    if session is None:
        return None
    principal = await session_principal(state.reads, session.token)
    return None if principal is None else Viewer(principal, session)


async def current_viewer(request: Request, state: StateDep, codec: CodecDep) -> Viewer:
    viewer = await viewer_from_cookie(request, state, codec)
    if viewer is None:
        raise LoginRequiredError()
    return viewer


CurrentViewer = Annotated[Viewer, Depends(current_viewer)]


def check_same_origin(request: Request, public_url: str | None = None) -> None:
    """Refuse a POST another site made the browser send. ``Origin`` must name the host
    the request was sent to (its ``Host`` header) or the configured ``ATLAS_PUBLIC_URL``
    (a proxy that rewrites ``Host``)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in _ALLOWED_FETCH_SITES:
        raise UiForbiddenError("Cross-site form posts are refused")
    origin = request.headers.get("origin")
    if origin is None:
        return
    ours = {request.headers.get("host", "").lower()}
    if public_url:
        ours.add(urlsplit(public_url).netloc.lower())
    ours.discard("")
    if origin == "null" or urlsplit(origin).netloc.lower() not in ours:
        raise UiForbiddenError("Form posts from another origin are refused")


def check_csrf(viewer: Viewer, submitted: str | None) -> None:
    expected = viewer.session.csrf_token
    if not submitted or not hmac.compare_digest(submitted.encode(), expected.encode()):
        raise UiForbiddenError("The form's security token is missing or stale; reload the page")
