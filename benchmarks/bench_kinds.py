"""The peer benchmark's job kind, declared on the public API as a user's kind is and
loaded through ``ATLAS_KINDS`` (:mod:`benchmarks.peer_adapter` sets it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from atlas_jobs import Context, RetryPolicy, kind

started: Callable[[Mapping[str, Any]], None] = lambda _input: None  # noqa: E731
"""Called with each job's input as its handler starts (the adapter times pickups)."""


class Tagged(BaseModel):
    """A measured job's label (``seq-<n>``, or ``warm-<n>`` for the warm-up)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field(max_length=200)


@kind(
    "bench.noop",
    version=1,
    input=Tagged,
    description="Does nothing and succeeds (the peer benchmark's job).",
    retry=RetryPolicy(
        attempts=3, max_elapsed_seconds=600, backoff_base_seconds=0.1, backoff_cap_seconds=5
    ),
    timeout=60,
)
async def bench_noop(ctx: Context[Tagged]) -> None:
    started({"tag": ctx.input.tag})
