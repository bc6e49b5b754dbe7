"""The OpenAPI document: generated from the app, post-processed, rendered stably.

Post-processing makes the document say what the server does, in a shape generators
handle without hand edits:

* error answers are ``application/problem+json`` with their problem schema (``Problem``
  or a variant with typed extension members); FastAPI's own ``HTTPValidationError`` is
  replaced by ``ValidationProblem``; every problem ``type`` is the enum ``ProblemType``;
* optional header parameters are plain strings (not ``string | null``: a generated
  client would send ``None``);
* the event stream is ``text/event-stream`` text, outside the JSON models;
* the lifecycle's vocabularies carry their one-line docs (which states are terminal);
* descriptions are plain prose (no reStructuredText roles or double backquotes);
* ``servers`` names where the API lives.

``render_openapi`` sorts keys and ends with a newline so the committed
``openapi/openapi.json`` diffs cleanly; a test fails when it drifts from the code.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from atlas_jobs._app.api.errors import PROBLEM_MEDIA_TYPE, problem_type_uris
from atlas_jobs._app.api.problem_examples import problem_example
from atlas_jobs._app.lifecycle import DELIVERY_DOCS, STATE_DOCS, TERMINAL_STATES

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
VALIDATION_PROBLEM_REF = {"$ref": "#/components/schemas/ValidationProblem"}
SERVERS = [
    {"url": "/", "description": "The server that serves this document."},
    {"url": "http://127.0.0.1:8000", "description": "`make run` on this machine."},
]
SSE_DESCRIPTION = (
    "A `text/event-stream` (Server-Sent Events). Each event is `event: transition` "
    "(`id:` the history seq, `data:` a HistoryItem as JSON) or `event: progress` (`data:` "
    "the JobPublic status as JSON); comment lines keep the connection alive. Resume with "
    "`Last-Event-ID`. The stream ends once the job is terminal and its delivery settled."
)
STATUS_EXAMPLE: dict[str, Any] = {
    "id": "0b8f6a3e-3c1d-4c55-9a57-2f1e6f0b9d41",
    "kind": "atlas.bundle",
    "kind_version": 1,
    "state": "running",
    "reason": "claimed",
    "created_at": "2026-11-29T09:00:00Z",
    "updated_at": "2026-11-29T09:00:05Z",
    "finished_at": None,
    "attempt": 1,
    "max_attempts": 3,
    "next_attempt_at": None,
    "last_error": None,
    "lease_expires_at": "2026-11-29T09:00:35Z",
    "heartbeat_at": "2026-11-29T09:00:05Z",
    "wait": None,
    "progress": {
        "stage": "build",
        "plan_revision": 2,
        "stages": [
            {"name": "validate", "unit": "checks", "done": 4, "total": 4},
            {"name": "build", "unit": "tiles", "done": 2, "total": 6},
        ],
    },
    "delivery": {"state": "partial_private", "expires_at": None},
    "error": None,
    "cancel": None,
    "replay_of": None,
    "links": {
        "self": "/v1/jobs/0b8f6a3e-3c1d-4c55-9a57-2f1e6f0b9d41",
        "history": "/v1/jobs/0b8f6a3e-3c1d-4c55-9a57-2f1e6f0b9d41/history",
        "events": "/v1/jobs/0b8f6a3e-3c1d-4c55-9a57-2f1e6f0b9d41/events",
        "result": None,
        "cancel": "/v1/jobs/0b8f6a3e-3c1d-4c55-9a57-2f1e6f0b9d41/cancel",
    },
}
CREATE_EXAMPLE: dict[str, Any] = {
    "kind": "atlas.bundle",
    "input": {"preset": "coast", "pages": ["cover", "summary"], "format": "text-bundle-v1"},
}
NOT_FOUND_EXAMPLE: dict[str, Any] = {
    "type": "urn:atlas-jobs:problem:job-not-found",
    "title": "No such job",
    "status": 404,
    "detail": "No such job",
}
EXAMPLES: dict[str, dict[str, dict[str, Any]]] = {
    "jobs-create": {"request": CREATE_EXAMPLE, "202": {**STATUS_EXAMPLE, "state": "queued"}},
    "jobs-get": {"200": STATUS_EXAMPLE, "404": NOT_FOUND_EXAMPLE},
    "jobs-cancel": {"202": {**STATUS_EXAMPLE, "state": "cancel_requested"}},
}
"""Examples by operationId: the request body and answers by status code."""
_ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc):`~?([^`]+)`")


def _plain(text: str) -> str:
    """reStructuredText -> Markdown: roles become code, double backquotes single."""
    return _ROLE.sub(r"`\1`", text).replace("``", "`")


def _walk_descriptions(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = _plain(value)
            else:
                _walk_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            _walk_descriptions(item)


def _problem_content(answer: dict[str, Any]) -> None:
    """An error answer: its declared problem schema, as application/problem+json."""
    declared = (answer.get("content") or {}).get("application/json", {}).get("schema")
    if declared is None or declared.get("$ref", "").endswith("/HTTPValidationError"):
        declared = VALIDATION_PROBLEM_REF if declared else PROBLEM_REF
    answer["content"] = {PROBLEM_MEDIA_TYPE: {"schema": declared}}


def _examples(document: dict[str, Any]) -> None:
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            wanted = EXAMPLES.get(operation.get("operationId", ""), {})
            for where, example in wanted.items():
                if where == "request":
                    media = operation["requestBody"]["content"]["application/json"]
                else:
                    media = next(iter(operation["responses"][where]["content"].values()))
                media["example"] = example


def _vocabularies(schemas: dict[str, Any]) -> None:
    terminal = ", ".join(f"`{s.value}`" for s in sorted(TERMINAL_STATES))
    schemas["JobState"]["description"] = (
        "Execution state of a job, owned by the server. Terminal states never change: "
        f"{terminal}.\n\n"
        + "\n".join(f"* `{state.value}`: {doc}" for state, doc in STATE_DOCS.items())
    )
    schemas["JobState"]["x-terminal-states"] = sorted(s.value for s in TERMINAL_STATES)
    schemas["DeliveryState"]["description"] = (
        "Where the result stands, apart from the execution state. Only `available` can "
        "be fetched.\n\n"
        + "\n".join(f"* `{state.value}`: {doc}" for state, doc in DELIVERY_DOCS.items())
    )
    uris = problem_type_uris()
    schemas["ProblemType"] = {
        "type": "string",
        "enum": uris,
        # Readable member names in generated SDKs (JOB_NOT_FOUND, not URNATLAS_...).
        "x-enum-varnames": [uri.rsplit(":", 1)[1].upper().replace("-", "_") for uri in uris],
        "title": "ProblemType",
        "description": "Every problem `type` the API answers (`urn:atlas-jobs:problem:*`).",
    }
    for name, schema in schemas.items():
        if name.endswith("Problem") and "type" in schema.get("properties", {}):
            described = schema["properties"]["type"].get("description")
            schema["properties"]["type"] = {
                "$ref": "#/components/schemas/ProblemType",
                "description": described,
            }


def build_openapi(app: FastAPI) -> dict[str, Any]:
    document = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
        servers=SERVERS,
    )
    for path, path_item in document.get("paths", {}).items():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                if parameter.get("in") == "header" and "anyOf" in schema:
                    kept = [s for s in schema.pop("anyOf") if s.get("type") != "null"]
                    schema.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
            for code, answer in operation.get("responses", {}).items():
                declares_health = "#/components/schemas/Health" in json.dumps(answer)
                if code[0] in "45" and not declares_health:
                    _problem_content(answer)
                    example = problem_example(operation.get("operationId", ""), path, int(code))
                    if example is not None:
                        answer["content"][PROBLEM_MEDIA_TYPE]["example"] = example
                if code == "304":
                    answer.pop("content", None)
            ok = operation.get("responses", {}).get("200", {})
            if "text/event-stream" in ok.get("content", {}):
                # Outside the JSON models, and untyped: a generated client hands over
                # the stream as it came instead of parsing it as one JSON body, and a
                # validator reading event by event (schemathesis) accepts every event.
                ok["content"] = {"text/event-stream": {"schema": {"description": SSE_DESCRIPTION}}}
    _examples(document)
    schemas = document.get("components", {}).get("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    _vocabularies(schemas)
    _walk_descriptions(document)
    return document


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def render_openapi() -> str:
    from atlas_jobs._app.api.main import create_app

    document = create_app().openapi()
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
