"""Job kinds: what a client may submit. Shared by the API (validation) and the workers
(handlers are registered in ``atlas_jobs._workers.handlers`` against these specs)."""

from atlas_jobs._app.kinds.registry import KINDS, KindSpec, get_kind, handler_key

__all__ = ["KINDS", "KindSpec", "get_kind", "handler_key"]
