"""External destinations: an allow-list in configuration (``ATLAS_DESTINATIONS``).

A job names a destination; it never carries a URL (no server-side request forgery):
the base URL, the request timeout, the concurrency limit and the reconciliation budget
all come from here. Shared by the API (a job naming an unknown destination is 422) and
the workers (``atlas_jobs._workers.external`` performs the operations).
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

DESTINATION_NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"


class Destination(BaseModel):
    """One allowed destination.

    ``url`` is the base every operation path is joined to; ``timeout_seconds`` bounds one
    request; ``concurrency`` is the most operations in flight to it across all worker
    processes; ``reconcile_checks`` lookups, ``reconcile_interval_seconds`` apart, may
    settle an uncertain operation before the job goes ``unresolved`` (``unreconciled``);
    ``confirm_deadline_seconds`` bounds the wait for an asynchronous confirmation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    concurrency: int = Field(default=4, ge=1, le=1000)
    reconcile_checks: int = Field(default=5, ge=1, le=100)
    reconcile_interval_seconds: float = Field(default=2.0, ge=0, le=600)
    confirm_deadline_seconds: float = Field(default=3600.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_base(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("a destination url must be an http(s) URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("a destination url must not carry credentials, a query or fragment")
        return value.rstrip("/")


Destinations = Mapping[str, Destination]


def destination_names(destinations: Destinations) -> str:
    return ", ".join(sorted(destinations)) or "(none configured)"
