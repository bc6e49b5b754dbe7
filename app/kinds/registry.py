"""The job kinds of this process, loaded once from their declarations.

Kinds are declared in the users' own modules on the public API (:mod:`atlas_jobs.declaration`)
and found, in this order:

1. the built-in kinds (``atlas_jobs.builtin``) unless ``ATLAS_BUILTIN_KINDS=false``;
2. the modules named in ``ATLAS_KINDS`` (comma-separated; ``--kinds`` on the command line
   sets it for the process and the processes it starts);
3. the ``atlas_jobs.kinds`` entry-point group of the installed distributions, unless
   ``ATLAS_KIND_ENTRY_POINTS=false``. An entry point names a module, a :class:`Kind` or
   an iterable of them.

A module contributes every :class:`~atlas_jobs.declaration.Kind` at its top level. The API and
the workers load the same way, so both know the same declarations: the API accepts each
name at its newest version (:data:`KINDS`), a worker serves every declared version and
the older ones each declares compatible. A module that fails to import, or two
declarations of one ``name@version``, stop the process before it serves anything
(:class:`KindLoadError`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from atlas_jobs.declaration import Kind, Stage

ENTRY_POINT_GROUP = "atlas_jobs.kinds"
BUILTIN_MODULE = "atlas_jobs.builtin"
KINDS_VARIABLE = "ATLAS_KINDS"
BUILTIN_VARIABLE = "ATLAS_BUILTIN_KINDS"
ENTRY_POINTS_VARIABLE = "ATLAS_KIND_ENTRY_POINTS"


class KindLoadError(Exception):
    """The declarations could not be loaded; the message is one line naming the cause."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    """A declared job kind as the engine uses it.

    ``version`` is recorded on every job; a worker runs a job only with a handler for
    that version or one whose kind lists it in ``compatible_versions``.
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
    jitter: bool = True
    timeout_seconds: float | None = None
    stages: tuple[Stage, ...] = ()
    concurrency_key: str | None = None
    """The concurrency key its jobs share (``None``: no limit; :mod:`atlas_jobs._app.fairness`)."""
    concurrency_limit: int | None = None
    concurrency_rate: int | None = None
    """The declared start rate: starts per ``concurrency_period_seconds`` (``None``: none)."""
    concurrency_period_seconds: float | None = None
    concurrency_per_job: bool = False
    """Whether a job may name its own key (stored under ``concurrency_key``)."""
    source: str = ""
    """Where the declaration came from (a module, an entry point): for start-up logs."""
    declaration: Kind[Any] | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        return handler_key(self.name, self.version)

    @property
    def description(self) -> str:
        return self.summary

    @classmethod
    def of(cls, kind: Kind[Any], *, source: str) -> KindSpec:
        retry = kind.retry
        rate = None if kind.concurrency is None else kind.concurrency.rate
        return cls(
            name=kind.name,
            version=kind.version,
            input_model=kind.input,
            max_attempts=retry.attempts,
            max_elapsed_seconds=round(retry.max_elapsed_seconds),
            summary=kind.description,
            retry_base_seconds=retry.backoff_base_seconds,
            retry_max_seconds=retry.backoff_cap_seconds,
            compatible_versions=kind.compatible_versions,
            jitter=retry.jitter,
            timeout_seconds=kind.timeout,
            stages=kind.stages,
            concurrency_key=None
            if kind.concurrency is None
            else (kind.concurrency.key or kind.name),
            concurrency_limit=None if kind.concurrency is None else kind.concurrency.limit,
            concurrency_rate=None if rate is None else rate.starts,
            concurrency_period_seconds=None if rate is None else rate.per_seconds,
            concurrency_per_job=kind.concurrency is not None and kind.concurrency.per_job,
            source=source,
            declaration=kind,
        )


def handler_key(kind: str, version: int) -> str:
    """The claim filter's key for "this worker can run kind@version"."""
    return f"{kind}@{version}"


@dataclass(frozen=True, slots=True)
class Registry:
    """Every declaration loaded, by ``name@version``."""

    declared: Mapping[str, KindSpec]

    @property
    def newest(self) -> dict[str, KindSpec]:
        """Each name at its newest declared version: what the API creates."""
        newest: dict[str, KindSpec] = {}
        for spec in self.declared.values():
            if spec.name not in newest or spec.version > newest[spec.name].version:
                newest[spec.name] = spec
        return dict(sorted(newest.items()))

    def served(self) -> dict[str, KindSpec]:
        """Every ``name@version`` a worker with these declarations runs: each declared
        version, and the older versions each declares compatible (a declared version's
        own handler wins over a newer one's compatibility)."""
        keys = dict(self.declared)
        for spec in sorted(self.declared.values(), key=lambda s: -s.version):
            for version in spec.compatible_versions:
                keys.setdefault(handler_key(spec.name, version), spec)
        return keys


def _configured_modules() -> list[str]:
    raw = os.environ.get(KINDS_VARIABLE, "")
    return [m.strip() for m in raw.replace(";", ",").split(",") if m.strip()]


def _flag(name: str) -> bool:
    return os.environ.get(name, "true").strip().lower() not in {"0", "false", "no", "off"}


def _kinds_in(value: object) -> list[Kind[Any]]:
    if isinstance(value, Kind):
        return [value]
    if isinstance(value, ModuleType):
        found = [v for v in vars(value).values() if isinstance(v, Kind)]
        if not found:
            raise KindLoadError(
                f"the kinds module {value.__name__!r} holds no atlas_jobs.Kind at its top level"
            )
        return found
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        found = [v for v in value if isinstance(v, Kind)]
        if found:
            return found
    raise KindLoadError(f"{value!r} holds no atlas_jobs.Kind")


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except Exception as exc:  # any failure of the user's module: one line, then exit
        raise KindLoadError(
            f"cannot import the kinds module {module!r}: {type(exc).__name__}: {exc}"
        ) from exc


def load(
    modules: Sequence[str] | None = None,
    *,
    builtin: bool | None = None,
    use_entry_points: bool | None = None,
) -> Registry:
    """Import the declarations (see the module's docstring); arguments left ``None``
    come from the environment."""
    sources: list[tuple[str, object]] = []
    if builtin if builtin is not None else _flag(BUILTIN_VARIABLE):
        sources.append((BUILTIN_MODULE, _import(BUILTIN_MODULE)))
    for module in modules if modules is not None else _configured_modules():
        sources.append((module, _import(module)))
    if use_entry_points if use_entry_points is not None else _flag(ENTRY_POINTS_VARIABLE):
        for point in entry_points(group=ENTRY_POINT_GROUP):
            where = f"entry point {point.name} ({point.value})"
            try:
                sources.append((where, point.load()))
            except Exception as exc:
                raise KindLoadError(
                    f"cannot load the {where}: {type(exc).__name__}: {exc}"
                ) from exc
    declared: dict[str, KindSpec] = {}
    seen: set[int] = set()
    for where, value in sources:
        for kind in _kinds_in(value):
            if id(kind) in seen:  # one module named twice, or re-exported
                continue
            seen.add(id(kind))
            if kind.key in declared:
                raise KindLoadError(
                    f"{kind.key} is declared twice: in {declared[kind.key].source} and in {where}"
                )
            declared[kind.key] = KindSpec.of(kind, source=where)
    return Registry(declared)


class _Loaded(Mapping[str, KindSpec]):
    """The process's kinds by name (newest version), loaded at first use."""

    def __init__(self) -> None:
        self._registry: Registry | None = None
        self._newest: dict[str, KindSpec] = {}
        self._served: dict[str, KindSpec] = {}

    @property
    def registry(self) -> Registry:
        if self._registry is None:
            self.use(load())
        assert self._registry is not None
        return self._registry

    def use(self, registry: Registry) -> None:
        """Adopt ``registry`` (before anything asked: at start-up, or in a test)."""
        self._registry = registry
        self._newest = registry.newest
        self._served = registry.served()

    @property
    def served(self) -> dict[str, KindSpec]:
        """Every ``kind@version`` a worker with these declarations runs (computed once)."""
        _ = self.registry
        return self._served

    def __getitem__(self, name: str) -> KindSpec:
        _ = self.registry
        return self._newest[name]

    def __iter__(self) -> Iterator[str]:
        _ = self.registry
        return iter(self._newest)

    def __len__(self) -> int:
        _ = self.registry
        return len(self._newest)

    def __contains__(self, name: object) -> bool:
        _ = self.registry
        return name in self._newest


KINDS = _Loaded()
"""The kinds the API accepts, by name, each at its newest declared version."""


def get_kind(name: str) -> KindSpec | None:
    return KINDS.get(name)


def declared_kind(name: str, version: int) -> KindSpec | None:
    """The declaration of ``name@version`` (or the one that serves it as compatible)."""
    return KINDS.served.get(handler_key(name, version))
