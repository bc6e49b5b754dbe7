"""Handlers by ``"kind@version"``: which job kinds this worker can run.

Each declared kind (:mod:`atlas_jobs._app.kinds.registry`) becomes a handler
(:func:`atlas_jobs._workers.declared.handler_of`), served under its own version and the
older versions it declares compatible. The claim filter uses these keys, so a job whose
kind version no handler serves stays visibly queued for a worker that can run it --
never failed for that reason alone.
"""

from __future__ import annotations

from atlas_jobs._app.kinds import KINDS
from atlas_jobs._app.kinds.registry import Registry
from atlas_jobs._workers.handlers.base import NO_FILES, Handler, PublishPlan


def registry(kinds: Registry | None = None) -> dict[str, Handler]:
    """Every ``kind@version`` key this worker serves, compatible versions included."""
    from atlas_jobs._workers.declared import handler_of  # it imports this package's base

    served = (kinds if kinds is not None else KINDS.registry).served()
    handlers: dict[str, Handler] = {}
    made: dict[str, Handler] = {}
    for key, spec in served.items():
        assert spec.declaration is not None
        own = spec.key
        if own not in made:
            made[own] = handler_of(spec.declaration)
        handlers[key] = made[own]
    return handlers


__all__ = ["NO_FILES", "Handler", "PublishPlan", "registry"]
