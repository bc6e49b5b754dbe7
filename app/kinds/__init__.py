"""Job kinds: what a client may submit. Shared by the API (validation) and the workers
(handlers are registered in ``workers.handlers`` against these specs)."""

from app.kinds.registry import KINDS, KindSpec, get_kind, handler_key

__all__ = ["KINDS", "KindSpec", "get_kind", "handler_key"]
