"""Errors on ``/ui`` paths answered as pages, not as problem documents.

An unauthenticated page redirects to the login form (an htmx fragment request gets
``HX-Redirect``, an event stream a bare 401); another owner's job, an unknown one and a
malformed id all get the same "not found" page with 404, as the API answers them;
refused posts 403; anything the API would answer as a problem keeps its status (and
``Retry-After``) with a page saying so.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from atlas_jobs._app.api.errors import ApiError, JobNotFoundError, RouteNotFoundError
from atlas_jobs._app.ui.auth import LoginRequiredError, UiForbiddenError, UiNotFoundError
from atlas_jobs._app.ui.rendering import render
from atlas_jobs._app.ui.routes import PAGE_HEADERS, UiBadFilterError, html

UI_PREFIX = "/ui"


def on_ui_path(request: Request) -> bool:
    path = request.url.path
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def login_redirect(request: Request) -> Response:
    if "text/event-stream" in request.headers.get("accept", ""):
        return PlainTextResponse("log in again", status_code=401, headers=PAGE_HEADERS)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    login = "/ui/login?" + urlencode({"next": target})
    if request.headers.get("hx-request") == "true":
        return PlainTextResponse(
            "log in again", status_code=401, headers={**PAGE_HEADERS, "HX-Redirect": login}
        )
    return RedirectResponse(login, status_code=303, headers=PAGE_HEADERS)


def not_found_page() -> Response:
    return html(render("not_found.html", viewer=None, csrf=""), 404)


def error_page(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> Response:
    body = render("error.html", viewer=None, csrf="", status=status, title=title, detail=detail)
    return html(body, status, headers)


def api_error_page(request: Request, error: ApiError) -> Response | None:
    """The page for an API error raised on a ``/ui`` path (``None`` elsewhere)."""
    if not on_ui_path(request):
        return None
    if isinstance(error, JobNotFoundError | RouteNotFoundError):
        return not_found_page()
    keep = {k: v for k, v in error.headers.items() if k.lower() in {"retry-after", "allow"}}
    return error_page(error.status, error.title, error.detail, keep)


def install_ui_errors(app: FastAPI) -> None:
    async def on_login_required(request: Request, exc: Exception) -> Response:
        return login_redirect(request)

    async def on_forbidden(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, UiForbiddenError)
        if isinstance(exc, UiBadFilterError):
            return error_page(422, "The filter is invalid", exc.detail)
        return error_page(403, "Forbidden", exc.detail)

    async def on_not_found(request: Request, exc: Exception) -> Response:
        return not_found_page()

    app.add_exception_handler(LoginRequiredError, on_login_required)
    app.add_exception_handler(UiForbiddenError, on_forbidden)
    app.add_exception_handler(UiNotFoundError, on_not_found)
