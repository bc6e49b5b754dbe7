"""The registry of job kinds by name: input model, version and retry budget."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pydantic import BaseModel

from atlas_jobs._app.kinds.bundle import BundleInput
from atlas_jobs._app.kinds.document import DocumentInput
from atlas_jobs._app.kinds.noop import NoopInput


@dataclass(frozen=True, slots=True)
class KindSpec:
    """A job kind as the API accepts it.

    ``version`` is recorded on every job; a worker runs a job only with a handler for
    that version or one listed in the handler's compatible versions.
    """

    name: str
    version: int
    input_model: type[BaseModel]
    max_attempts: int
    max_elapsed_seconds: int
    summary: str
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 60.0
    compatible_versions: frozenset[int] = field(default_factory=frozenset)


def handler_key(kind: str, version: int) -> str:
    """The claim filter's key for "this worker can run kind@version"."""
    return f"{kind}@{version}"


KINDS: Mapping[str, KindSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            KindSpec(
                name="atlas.bundle",
                version=1,
                input_model=BundleInput,
                max_attempts=5,
                max_elapsed_seconds=3600,
                summary="Builds a text tile bundle from a preset (SPEC section 4).",
                retry_base_seconds=0.5,
                retry_max_seconds=30.0,
            ),
            KindSpec(
                name="atlas.noop",
                version=1,
                input_model=NoopInput,
                max_attempts=3,
                max_elapsed_seconds=600,
                summary="Does nothing and succeeds; used by benchmarks and smoke checks.",
                retry_base_seconds=0.1,
                retry_max_seconds=5.0,
            ),
            KindSpec(
                name="document.publish",
                version=1,
                input_model=DocumentInput,
                max_attempts=5,
                max_elapsed_seconds=7 * 86_400 + 3600,
                summary=(
                    "Extracts a document's sections, waits for a reviewer, then publishes "
                    "it to a configured destination (reconciled before any repeat)."
                ),
                retry_base_seconds=0.5,
                retry_max_seconds=30.0,
            ),
        )
    }
)


def get_kind(name: str) -> KindSpec | None:
    return KINDS.get(name)
