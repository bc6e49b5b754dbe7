"""``/docs`` (Swagger UI) and ``/redoc`` that work without internet: their scripts and
styles are served by the app itself, from the files the ``fastapi-offline`` package
ships, instead of FastAPI's default CDN links. ReDoc's bundle would still fetch the
Redocly logo of its sidebar footer from a CDN: the app serves the bundle with that one
URL replaced by an empty image (the footer then shows its text alone), and Swagger UI is
told not to send the document to its online validator."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import NoMatchFound

DOCS_ASSETS = "/docs-assets"
REDOC_SCRIPT = "/docs-pages/redoc.standalone.js"
REDOC_LOGO_URL = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def assets_dir() -> Path:
    """The Swagger UI and ReDoc bundles shipped in the ``fastapi_offline`` package."""
    return Path(str(files("fastapi_offline") / "static"))


@lru_cache(maxsize=1)
def redoc_script() -> bytes:
    """ReDoc's bundle with the one asset it would load from outside replaced."""
    text = (assets_dir() / "redoc.standalone.js").read_text(encoding="utf-8")
    return text.replace(REDOC_LOGO_URL, "data:,").encode("utf-8")


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
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(REDOC_SCRIPT, include_in_schema=False)
    async def redoc_bundle() -> Response:
        return Response(
            redoc_script(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=REDOC_SCRIPT,
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
