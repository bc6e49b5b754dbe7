"""Declaring a job kind: :func:`kind` (a decorator) or :class:`Kind` (the object it makes).

A kind is what a client names in ``POST /v1/jobs``: a name and a version, the pydantic
model its input must match, how it reports progress (its :class:`Stage` list), how often
and how long it may be tried (:class:`RetryPolicy`), how long one attempt may run
(``timeout``), how many of its jobs may run at once (:class:`Concurrency`), which older
versions its handler can also run, and the handler itself::

    from pydantic import BaseModel
    from atlas_jobs import Context, Result, RetryPolicy, Stage, kind

    class Thumbnail(BaseModel):
        url: str

    @kind(
        "thumbnail.render",
        version=1,
        input=Thumbnail,
        description="Renders three sizes of an image.",
        stages=[Stage("fetch", "images"), Stage("render", "sizes")],
        retry=RetryPolicy(attempts=5, transient={ConnectionError: "source_unreachable"}),
        timeout=60,
    )
    async def render(ctx: Context[Thumbnail]) -> Result:
        ...

The API and the workers load the same declarations (``ATLAS_KINDS``, ``--kinds`` or the
``atlas_jobs.kinds`` entry-point group): the API validates a job's input against the
model, a worker runs the handler. Nothing here touches the database.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel

NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
"""A kind's name: lower-case dotted words (``thumbnail.render``); stored on every job."""
STAGE_PATTERN = r"^[a-z][a-z0-9_-]{0,62}$"
MAX_NAME_LENGTH = 100
DEFAULT_TIMEOUT_SECONDS = 600.0
"""An attempt's time limit when the kind names none: ten minutes."""

InputT = TypeVar("InputT", bound=BaseModel)

ErrorCodes = Mapping[type[BaseException], str]
"""Exception classes and the reason code the history keeps for them."""


@dataclass(frozen=True, slots=True)
class Stage:
    """A named step of the work and the unit it is counted in (``Stage("render",
    "sizes")`` reads "Render: 2 of 3 sizes"). The handler sets each stage's total when
    it plans (:meth:`atlas_jobs.Context.plan`) and may grow it later (the plan revision)."""

    name: str
    unit: str

    def __post_init__(self) -> None:
        if not re.fullmatch(STAGE_PATTERN, self.name):
            raise ValueError(f"stage name {self.name!r} must match {STAGE_PATTERN}")
        if not self.unit or len(self.unit) > 40:
            raise ValueError(f"stage {self.name!r}: the unit must be 1-40 characters")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and for how long a job of this kind is tried.

    * ``attempts`` -- attempts in all, the first included (``1``: never retried);
    * ``max_elapsed_seconds`` -- no new attempt starts later than this after creation;
    * ``backoff_base_seconds`` / ``backoff_cap_seconds`` -- the delay before attempt
      ``n + 1`` is ``min(cap, base * 2 ** (n - 1))``, drawn uniformly below that with
      ``jitter`` (full jitter, the default) so jobs that failed together spread out;
    * ``transient`` / ``permanent`` -- exception classes mapped to the reason code the
      history keeps: a transient one is retried while the budget lasts, a permanent one
      fails the job at once. The most specific class wins (a subclass listed as permanent
      beats its base listed as transient). An exception listed nowhere is transient with
      the code ``unexpected_error``: a bug or a flaky dependency should not fail a job
      for good on its first occurrence, and the budget bounds what it costs.

    When the budget is spent the job is ``unresolved``: it waits for an operator, who
    may resume it with a new budget.
    """

    attempts: int = 5
    max_elapsed_seconds: float = 3600.0
    backoff_base_seconds: float = 1.0
    backoff_cap_seconds: float = 60.0
    jitter: bool = True
    transient: ErrorCodes = field(default_factory=dict)
    permanent: ErrorCodes = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= 100:
            raise ValueError("attempts must be between 1 and 100")
        if self.max_elapsed_seconds <= 0:
            raise ValueError("max_elapsed_seconds must be positive")
        if not 0 < self.backoff_base_seconds <= self.backoff_cap_seconds:
            raise ValueError("backoff: 0 < backoff_base_seconds <= backoff_cap_seconds")
        for codes in (self.transient, self.permanent):
            for cls, code in codes.items():
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    raise TypeError(f"{cls!r} is not an exception class")
                if not re.fullmatch(r"^[a-z][a-z0-9_]{0,62}$", code):
                    raise ValueError(f"reason code {code!r} must be a lower_snake_case word")

    def classify(self, exc: BaseException) -> tuple[str, bool] | None:
        """``(code, retryable)`` for the most specific listed class of ``exc``, or
        ``None`` when neither list names it."""
        for cls in type(exc).__mro__:
            if cls in self.permanent:
                return self.permanent[cls], False
            if cls in self.transient:
                return self.transient[cls], True
        return None


MAX_RATE_STARTS = 1_000_000
"""The most starts a declared rate allows per period (the bound of an operator's rate)."""
MAX_RATE_PERIOD_SECONDS = 86_400.0
"""The longest period of a declared rate: a day."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``starts`` jobs of a key start per ``per_seconds`` -- a token bucket that
    holds ``starts`` tokens and refills at ``starts / per_seconds`` a second, shared by
    every worker process (a burst of ``starts`` is allowed after a quiet period)."""

    starts: int
    per_seconds: float

    def __post_init__(self) -> None:
        if not 1 <= self.starts <= MAX_RATE_STARTS:
            raise ValueError(f"a rate's starts must be between 1 and {MAX_RATE_STARTS}")
        if not 0 < self.per_seconds <= MAX_RATE_PERIOD_SECONDS:
            raise ValueError(
                f"a rate's per_seconds must be above 0 and at most {MAX_RATE_PERIOD_SECONDS:g}"
            )


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most ``limit`` jobs of one key run at once, and at most ``rate`` start, across
    every worker process; give either or both.

    * ``key`` -- the key the kind's jobs share (default: the kind's name); kinds that
      name the same key share its limit (one destination, one printing press);
    * ``per_job`` -- a job may name its own key in its create body (``concurrency_key``,
      e.g. one customer's exports): stored as ``<key>/<named>``, each with ``limit``
      and ``rate``. Without it, a create body that names a key is refused (422);
    * ``rate`` -- a start rate, e.g. ``Rate(10, per_seconds=60)`` for an API that takes
      ten calls a minute.

    A key keeps the limit and rate declared by the first job that named it. Operators
    may change a key's limit and rate while Atlas runs (``atlas-jobs scheduling
    set-key``); theirs win, and clearing them brings back the declared ones."""

    limit: int | None = None
    key: str | None = None
    per_job: bool = False
    rate: Rate | None = None

    def __post_init__(self) -> None:
        if self.limit is None and self.rate is None:
            raise ValueError("Concurrency needs a limit, a rate or both")
        if self.limit is not None and not 1 <= self.limit <= 100_000:
            raise ValueError("concurrency limit must be between 1 and 100000")
        if self.key is not None and not re.fullmatch(
            r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,99}$", self.key
        ):
            raise ValueError(f"concurrency key {self.key!r}: 1-100 letters, digits or _.:@-")


@dataclass(frozen=True, slots=True)
class Result:
    """What a finished handler hands to the engine, which then publishes it in one
    transaction -- or loses to a cancel that came first, never both.

    * ``files`` -- publish the files the handler wrote with :meth:`Context.write_file`
      (private until then); the result lists them with signed download links;
    * ``reference`` -- further facts of the result (where an external publication lives,
      a receipt): an instance of the kind's ``result`` model when it declares one, else
      a JSON-able mapping. Never confidential: the owner reads it at
      ``GET /v1/jobs/{id}/result``.
    """

    files: bool = False
    reference: BaseModel | Mapping[str, Any] | None = None


Handler = Callable[..., "Awaitable[Result | None] | Result | None"]


@dataclass(frozen=True, slots=True, eq=False)
class Kind(Generic[InputT]):
    """A declared job kind (see the module's docstring). ``handler`` is an ``async def``
    of a :class:`~atlas_jobs.Context`, or a plain ``def`` of a
    :class:`~atlas_jobs.SyncContext`, which runs in a thread of its own so blocking or
    CPU-bound code stalls neither the worker's event loop nor its lease heartbeats."""

    name: str
    version: int
    input: type[InputT]
    handler: Handler
    description: str = ""
    result: type[BaseModel] | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout: float | None = DEFAULT_TIMEOUT_SECONDS
    compatible_versions: frozenset[int] = frozenset()
    stages: tuple[Stage, ...] = ()
    concurrency: Concurrency | None = None

    def __post_init__(self) -> None:
        if len(self.name) > MAX_NAME_LENGTH or not re.fullmatch(NAME_PATTERN, self.name):
            raise ValueError(f"kind name {self.name!r} must match {NAME_PATTERN}")
        if not 1 <= self.version <= 10_000:
            raise ValueError(f"{self.name}: version must be between 1 and 10000")
        if not (isinstance(self.input, type) and issubclass(self.input, BaseModel)):
            raise TypeError(f"{self.name}: input must be a pydantic model class")
        if self.result is not None and not issubclass(self.result, BaseModel):
            raise TypeError(f"{self.name}: result must be a pydantic model class")
        if not callable(self.handler):
            raise TypeError(f"{self.name}: the handler must be callable")
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"{self.name}: timeout must be positive (or None: no limit)")
        if self.version in self.compatible_versions:
            raise ValueError(f"{self.name}: a version is not compatible with itself")
        if any(v < 1 or v >= self.version for v in self.compatible_versions):
            raise ValueError(f"{self.name}: compatible versions are older versions")
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: stage names must be unique")

    @property
    def key(self) -> str:
        """``name@version``: what a worker serves and a job records."""
        return f"{self.name}@{self.version}"

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    def __repr__(self) -> str:
        return f"<Kind {self.key}>"


@overload
def kind(
    name: str,
    *,
    version: int = 1,
    input: type[InputT],
    description: str = "",
    result: type[BaseModel] | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
    compatible_versions: Iterable[int] = (),
    stages: Iterable[Stage] = (),
    concurrency: Concurrency | None = None,
) -> Callable[[Handler], Kind[InputT]]: ...


@overload
def kind(
    name: str,
    *,
    version: int = 1,
    input: None = None,
    description: str = "",
    result: type[BaseModel] | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
    compatible_versions: Iterable[int] = (),
    stages: Iterable[Stage] = (),
    concurrency: Concurrency | None = None,
) -> Callable[[Handler], Kind[BaseModel]]: ...


def kind(
    name: str,
    *,
    version: int = 1,
    input: type[Any] | None = None,
    description: str = "",
    result: type[BaseModel] | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
    compatible_versions: Iterable[int] = (),
    stages: Iterable[Stage] = (),
    concurrency: Concurrency | None = None,
) -> Callable[[Handler], Kind[Any]]:
    """Declare the decorated function as the handler of kind ``name`` at ``version``.

    The decorated name becomes the :class:`Kind`; keep it at the top level of a module
    that ``ATLAS_KINDS`` (or ``--kinds``, or an ``atlas_jobs.kinds`` entry point) names.
    ``input`` defaults to a model that accepts only ``{}``; ``description`` defaults to
    the handler's docstring and reaches the OpenAPI document.
    """

    def declare(handler: Handler) -> Kind[Any]:
        return Kind(
            name=name,
            version=version,
            input=input if input is not None else _NoInput,
            handler=handler,
            description=description or inspect.cleandoc(handler.__doc__ or ""),
            result=result,
            retry=retry if retry is not None else RetryPolicy(),
            timeout=timeout,
            compatible_versions=frozenset(compatible_versions),
            stages=tuple(stages),
            concurrency=concurrency,
        )

    return declare


class _NoInput(BaseModel):
    """No input: ``{}``."""

    model_config = {"extra": "forbid", "frozen": True}
