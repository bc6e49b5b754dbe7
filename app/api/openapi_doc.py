"""The OpenAPI document: generated from the app, post-processed, rendered stably.

Post-processing makes the document say what the server does: error answers are
``application/problem+json`` with the ``Problem`` schema (FastAPI would declare its own
``HTTPValidationError`` as ``application/json``). ``render_openapi`` sorts keys and ends
with a newline so the committed ``openapi/openapi.json`` diffs cleanly; a test fails
when it drifts from the code.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.errors import PROBLEM_MEDIA_TYPE

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            for code, answer in operation.get("responses", {}).items():
                declares_health = "#/components/schemas/Health" in json.dumps(answer)
                if code[0] in "45" and not declares_health:
                    answer["content"] = {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}}
    schemas = document.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    return document


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def render_openapi() -> str:
    from app.api.main import create_app

    document = create_app().openapi()
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
