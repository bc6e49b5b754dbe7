"""``/docs`` (Swagger UI) and ``/redoc`` that work without internet: their scripts and
styles are served by the app itself, from the files the ``fastapi-offline`` package
ships, instead of FastAPI's default CDN links."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.routing import NoMatchFound

DOCS_ASSETS = "/docs-assets"


def assets_dir() -> Path:
    """The Swagger UI and ReDoc bundles shipped in the ``fastapi_offline`` package."""
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI, openapi_url: str = "/openapi.json") -> None:
    """Mount the assets and the two pages (the app is created with docs_url=None)."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )


def install_front_door(app: FastAPI) -> None:
    """``/`` leads somewhere: to the status page (``/ui/jobs``), or to ``/docs`` in an
    app without one -- not a JSON 404. Kept out of the OpenAPI document (a page, not
    an API resource). Call it after the pages are installed."""
    try:
        target = str(app.url_path_for("ui-jobs"))
    except NoMatchFound:
        target = "/docs"

    @app.get("/", include_in_schema=False)
    async def front_door() -> RedirectResponse:
        return RedirectResponse(target, status_code=303)


__all__ = ["install_docs", "install_front_door"]
