"""Request headers the hottest routes (create, status read) read themselves.

A header declared as a FastAPI parameter (``Header(...)``) is looked up and validated on
every request by FastAPI's generic parameter solving (``request_params_to_args``), a
large part of a status read's time (docs/performance.md, "Figures behind the code"). A
:class:`HeaderParam` does the same for one optional string header, in one place:

- :meth:`HeaderParam.read` takes the header from the request (any case of the name) and
  validates it with the same length bounds through a pydantic ``TypeAdapter``; a value
  out of bounds raises the ``RequestValidationError`` FastAPI would raise, located at
  ``("header", <Name>)``, which the app answers as the same RFC 9457 problem;
- :meth:`HeaderParam.openapi` is the parameter FastAPI documented for the declaration
  (after :func:`atlas_jobs._app.api.openapi_doc.build_openapi` drops the ``null``), given to the
  route through ``openapi_extra`` by :func:`documented`, so the document is unchanged.

Because the route reads the header, its value is checked after authentication and the
body: a request whose body and header are both invalid is answered with the body's
errors only (FastAPI listed both).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError


@dataclass(frozen=True)
class HeaderParam:
    """One optional request header: a string of ``min_length`` to ``max_length``
    characters."""

    name: str
    description: str
    max_length: int
    min_length: int | None = None
    examples: tuple[str, ...] = ()
    _adapter: TypeAdapter[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bounded = Annotated[str, Field(min_length=self.min_length, max_length=self.max_length)]
        object.__setattr__(self, "_adapter", TypeAdapter(bounded))

    def read(self, request: Request) -> str | None:
        """The header's (first) value, ``None`` when absent; a value out of bounds raises
        ``RequestValidationError`` (answered 422 ``invalid-request``)."""
        value = request.headers.get(self.name)
        if value is None:
            return None
        try:
            return self._adapter.validate_python(value)
        except ValidationError as exc:
            located = [
                {**error, "loc": ("header", self.name)} for error in exc.errors(include_url=False)
            ]
            raise RequestValidationError(located) from None

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI parameter object of this header."""
        schema: dict[str, Any] = {
            "type": "string",
            "title": self.name,
            "description": self.description,
            "maxLength": self.max_length,
        }
        if self.min_length is not None:
            schema["minLength"] = self.min_length
        if self.examples:
            schema["examples"] = list(self.examples)
        return {
            "name": self.name,
            "in": "header",
            "required": False,
            "description": self.description,
            "schema": schema,
        }


def documented(*headers: HeaderParam) -> dict[str, Any]:
    """A route's ``openapi_extra`` declaring ``headers`` as its header parameters (after
    any path parameter, where FastAPI put its declared ones)."""
    return {"parameters": [header.openapi() for header in headers]}


IDEMPOTENCY_KEY = HeaderParam(
    name="Idempotency-Key",
    description="Makes creation safe to retry: same key + same body = same job.",
    min_length=1,
    max_length=255,
)
IF_NONE_MATCH = HeaderParam(
    name="If-None-Match",
    description="The ETag of the status you have: 304 when it is still current.",
    max_length=512,
    examples=('W/"3"',),
)
PREFER = HeaderParam(
    name="Prefer",
    description="RFC 7240 preferences; `wait=N` holds the read until the job changes or N "
    "seconds pass (capped by the server; `Preference-Applied` says what was applied). "
    "Send it with `If-None-Match` to get 304 when nothing changed.",
    max_length=512,
    examples=("wait=25",),
)


_DELTA_SECONDS = re.compile(r"[0-9]{1,400}")  # RFC 9111 delta-seconds (1*DIGIT), bounded


def prefer_wait(prefer: str | None, cap: float) -> int | None:
    """The ``wait`` preference (RFC 7240 section 4.3: ``wait=delta-seconds``, an integer
    of seconds) capped at ``cap``; ``None`` when there is none or its value is not an
    integer (``wait=1e9``, ``wait=-1``, ``wait=2.5``): a preference the server cannot
    parse is ignored, never half-read. Preferences are comma-separated, each ``name
    [= value] *(; parameter)``; names are case-insensitive, a value may be quoted, and
    only the first ``wait`` counts (section 2)."""
    if not prefer:
        return None
    for preference in prefer.split(","):
        name, _, value = preference.split(";", 1)[0].partition("=")
        if name.strip().lower() != "wait":
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if not _DELTA_SECONDS.fullmatch(value):
            return None
        return int(min(int(value), cap))
    return None
