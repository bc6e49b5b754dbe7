"""Atlas Jobs: the public API for the people who write job kinds.

Everything a kind needs is importable from here, and nothing else of Atlas is public::

    from atlas_jobs import Context, Result, RetryPolicy, Stage, kind

Declare a kind with :func:`kind` in a module of your own package, name the module in
``ATLAS_KINDS`` (or ``--kinds``, or an ``atlas_jobs.kinds`` entry point), and both the
API and the workers load it. ``docs/kinds.md`` is the guide and the reference.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from atlas_jobs.context import Context, DeadlineRule, Outputs, Signal, SyncContext
    from atlas_jobs.declaration import (
        DEFAULT_TIMEOUT_SECONDS,
        Concurrency,
        Kind,
        Rate,
        Result,
        RetryPolicy,
        Stage,
        kind,
    )
    from atlas_jobs.errors import LeaseLost, PermanentError, TransientError
    from atlas_jobs.operations import DestinationName, Operation, Receipt

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "Concurrency",
    "Context",
    "DeadlineRule",
    "DestinationName",
    "Kind",
    "LeaseLost",
    "Operation",
    "Outputs",
    "PermanentError",
    "Rate",
    "Receipt",
    "Result",
    "RetryPolicy",
    "Signal",
    "Stage",
    "SyncContext",
    "TransientError",
    "kind",
]

# Every name is imported when first used: the declarations need pydantic, the context,
# the errors and the operations the engine, and ``import atlas_jobs`` (which every
# internal module and the console command pay for) stays free of both.
_LAZY = {
    "DEFAULT_TIMEOUT_SECONDS": "atlas_jobs.declaration",
    "Concurrency": "atlas_jobs.declaration",
    "Kind": "atlas_jobs.declaration",
    "Rate": "atlas_jobs.declaration",
    "Result": "atlas_jobs.declaration",
    "RetryPolicy": "atlas_jobs.declaration",
    "Stage": "atlas_jobs.declaration",
    "kind": "atlas_jobs.declaration",
    "Context": "atlas_jobs.context",
    "DeadlineRule": "atlas_jobs.context",
    "Outputs": "atlas_jobs.context",
    "Signal": "atlas_jobs.context",
    "SyncContext": "atlas_jobs.context",
    "LeaseLost": "atlas_jobs.errors",
    "PermanentError": "atlas_jobs.errors",
    "TransientError": "atlas_jobs.errors",
    "DestinationName": "atlas_jobs.operations",
    "Operation": "atlas_jobs.operations",
    "Receipt": "atlas_jobs.operations",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'atlas_jobs' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
