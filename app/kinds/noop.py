"""``atlas.noop``: does nothing and succeeds."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class NoopInput(BaseModel):
    """Input of `atlas.noop`: nothing required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str | None = Field(default=None, max_length=200, description="Free label, echoed nowhere.")
