"""``atlas.noop``: does nothing and succeeds -- for benchmarks and smoke checks."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from atlas_jobs import Context, RetryPolicy, kind


class NoopInput(BaseModel):
    """Input of `atlas.noop`: nothing required."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str | None = Field(default=None, max_length=200, description="Free label, echoed nowhere.")


@kind(
    "atlas.noop",
    version=1,
    input=NoopInput,
    description="Does nothing and succeeds; used by benchmarks and smoke checks.",
    retry=RetryPolicy(
        attempts=3, max_elapsed_seconds=600, backoff_base_seconds=0.1, backoff_cap_seconds=5
    ),
    timeout=60,
)
async def noop(ctx: Context[NoopInput]) -> None:
    return None
