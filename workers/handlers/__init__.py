"""Handlers by ``"kind@version"``: which job kinds this worker can run.

The claim filter uses these keys, so a job whose kind version no handler serves stays
visibly queued for a worker that can run it -- never failed for that reason alone.
A handler also serves the versions its kind declares compatible.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from atlas_jobs._app.kinds import KINDS, handler_key
from atlas_jobs._workers.handlers import bundle, document, noop
from atlas_jobs._workers.handlers.base import NO_FILES, Handler, PublishPlan

HANDLERS: Mapping[str, Handler] = MappingProxyType(
    {
        handler_key("atlas.bundle", 1): bundle.run,
        handler_key("atlas.noop", 1): noop.run,
        handler_key("document.publish", 1): document.run,
    }
)


def _with_compatible(handlers: Mapping[str, Handler]) -> dict[str, Handler]:
    keyed = dict(handlers)
    for spec in KINDS.values():
        own = handlers.get(handler_key(spec.name, spec.version))
        if own is not None:
            for version in spec.compatible_versions:
                keyed.setdefault(handler_key(spec.name, version), own)
    return keyed


def registry(handlers: Mapping[str, Handler] = HANDLERS) -> dict[str, Handler]:
    """Every ``kind@version`` key this worker serves, compatible versions included."""
    return _with_compatible(handlers)


__all__ = ["HANDLERS", "NO_FILES", "Handler", "PublishPlan", "registry"]
