"""Path templates: how a raw request path maps to the route that serves it.

Used for log and metric labels (a raw download path carries a signed token; templates
keep labels bounded) and for the ``Allow`` header of 405 answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

_UUID_SEGMENT = re.compile(
    r"/([a-z]+)/[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
    r"(?=/|$)"
)
_ID_PARAMETERS = {"jobs": "job_id", "schedules": "schedule_id", "webhooks": "webhook_id"}
"""The path parameter an id takes after its collection (``/v1/schedules/{schedule_id}``)."""
_ANY_JOB_SEGMENT = re.compile(r"^(/v1/jobs/)[^/]+(/[a-z]+)?$")
_KIND_ACTION = re.compile(r"^/v1/kinds/[^/]+/(pause|resume)$")
"""A kind's pause and resume: the kind is free text, the label its template."""
_DOWNLOADS = "/v1/downloads/"
_HTTP_METHODS = frozenset({"get", "put", "post", "delete", "options", "head", "patch", "trace"})


def route_template(path: str, known: Callable[[], frozenset[str]]) -> str:
    """The template (``/v1/jobs/{job_id}``) of a path, or ``unmatched``."""
    if path.startswith(_DOWNLOADS):
        return _DOWNLOADS + "{token}"
    if action := _KIND_ACTION.match(path):
        return f"/v1/kinds/{{kind}}/{action.group(1)}"
    template = _UUID_SEGMENT.sub(
        lambda m: f"/{m.group(1)}/{{{_ID_PARAMETERS.get(m.group(1), 'id')}}}", path
    )
    if template in known():
        return template
    # A malformed id (``/v1/jobs/not-a-uuid``) still belongs to the job routes.
    loose = _ANY_JOB_SEGMENT.sub(lambda m: m.group(1) + "{job_id}" + (m.group(2) or ""), path)
    return loose if loose in known() and loose != "/v1/jobs/{job_id}/" else "unmatched"


def allowed_methods(path: str, paths: Mapping[str, Any]) -> list[str]:
    """The methods the OpenAPI document declares for the route serving ``path``."""
    template = route_template(path, lambda: frozenset(paths))
    item = paths.get(template, {})
    return sorted(method.upper() for method in item if method in _HTTP_METHODS)
