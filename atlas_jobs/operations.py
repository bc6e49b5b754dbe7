"""External operations: side effects at a configured destination, done exactly once.

:meth:`atlas_jobs.Context.perform` sends an :class:`Operation` (``POST {destination}{path}``
with its body) under an operation id that is a function of the job and the ``step`` --
the same in every attempt, sent as ``Idempotency-Key`` -- recorded before the request
leaves. An uncertain outcome (a timeout, a reset, a 5xx) is reconciled by a lookup at
``{path}/{operation id}`` before anything is sent again; when lookups cannot decide, the
job goes ``unresolved`` with the evidence, for an operator. Destinations are named in
configuration (``ATLAS_DESTINATIONS``), never given as URLs in job input: use
:data:`DestinationName` as the type of an input field that names one.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from atlas_jobs._app.destinations import DESTINATION_NAME, destination_names
from atlas_jobs._workers.external import Operation, Receipt


def _configured(name: str) -> str:
    from atlas_jobs._app.settings import get_settings

    allowed = get_settings().destinations
    if name not in allowed:
        raise ValueError(f"unknown destination; configured: {destination_names(allowed)}")
    return name


DestinationName = Annotated[
    str,
    Field(
        pattern=DESTINATION_NAME,
        description="The name of a configured destination (ATLAS_DESTINATIONS), never a URL.",
    ),
    AfterValidator(_configured),
]
"""An input field naming a configured destination: refused (422) when not configured."""

__all__ = ["DestinationName", "Operation", "Receipt"]
