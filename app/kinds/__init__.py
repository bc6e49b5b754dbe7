"""Job kinds: the declarations this process loaded (:mod:`.registry`). Shared by the API
(validation, the OpenAPI document) and the workers (handlers)."""

from atlas_jobs._app.kinds.registry import (
    KINDS,
    KindLoadError,
    KindSpec,
    Registry,
    declared_kind,
    get_kind,
    handler_key,
)

__all__ = [
    "KINDS",
    "KindLoadError",
    "KindSpec",
    "Registry",
    "declared_kind",
    "get_kind",
    "handler_key",
]
