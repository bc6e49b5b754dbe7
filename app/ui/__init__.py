"""The status page: server-rendered HTML under ``/ui`` (Jinja2 + vendored htmx).

``/ui/login`` takes an API key once and sets a signed, HTTP-only, SameSite=Strict session
cookie (:mod:`atlas_jobs._app.ui.session`); ``/ui/jobs`` lists the caller's jobs; ``/ui/jobs/{id}``
shows one job -- label, stages, delivery, history, download links, Cancel -- live from
the job's feed (:mod:`atlas_jobs._app.ui.live`); ``/ui/kinds`` lists the kinds and the live
workers per version; ``/ui/queue`` is the operators' queue view and ``/ui/ops`` their
page of charts, paused kinds and jobs across owners (:mod:`atlas_jobs._app.ui.ops`). No
route here is in the OpenAPI document.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from atlas_jobs._app.ui import live as _live  # noqa: F401 - registers the event stream route
from atlas_jobs._app.ui import ops as _ops  # noqa: F401 - registers the operators' page
from atlas_jobs._app.ui.errors import api_error_page, install_ui_errors
from atlas_jobs._app.ui.rendering import STATIC_DIR
from atlas_jobs._app.ui.routes import router


def install_ui(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    install_ui_errors(app)


def ui_templates() -> frozenset[str]:
    """The route templates of the pages (for request metrics and log labels)."""
    return frozenset(getattr(route, "path", "") for route in router.routes)


__all__ = ["api_error_page", "install_ui", "ui_templates"]
