"""Optional OpenTelemetry tracing (the ``otel`` extra), off unless ``ATLAS_OTEL_ENABLED=1``.

When on, a process exports its spans over OTLP/HTTP, configured by the standard
variables (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_*``, ...):

* the API: one server span per request (FastAPI instrumentation; a W3C ``traceparent``
  header continues the caller's trace) and one span per SQL statement;
* the job: its creation records the request's ``traceparent`` in the creation's
  history ``data`` (ids only), so ``GET /v1/jobs/{id}/history`` shows the trace;
* a worker: every attempt runs in a span (``attempt <kind>``) whose parent is that
  request's span -- the same trace id, however many attempts and workers later --
  with the SQL statements of the attempt beneath it; the attempt's log lines carry
  that ``trace_id``.

Span attributes carry ids only (job, attempt, kind, attempt number) and SQL text with
bound parameters, never a payload. Nothing here imports OpenTelemetry's SDK unless
tracing is on, so an installation without the extra works.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import AsyncEngine

    from atlas_jobs._app.settings import Settings

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
"""A W3C trace context ``traceparent`` of version 00 (what is stored with a job)."""

_configured = False
_engine_instrumented = False


class TracingUnavailableError(RuntimeError):
    """``ATLAS_OTEL_ENABLED=1`` without the ``otel`` extra installed."""


def enabled() -> bool:
    """Whether this process configured tracing (:func:`configure`)."""
    return _configured


def configure(settings: Settings, service_name: str) -> bool:
    """Set up this process's tracer provider and OTLP exporter once, when the settings
    ask for tracing; True when tracing is on."""
    global _configured
    if not settings.otel_enabled or _configured:
        return _configured
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailableError(
            "ATLAS_OTEL_ENABLED=1 needs the otel extra: pip install 'atlas-jobs[otel]'"
        ) from exc
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(
        resource=Resource.create({"service.name": name}), sampler=_statements_in_context()
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _configured = True
    return True


def _statements_in_context() -> Any:
    """The default sampler (parent-based, always on), except that a client span (a SQL
    statement, a connect) with no parent is dropped: a worker's claim loop, heartbeats
    and maintenance query several times a second, and a trace per poll would bury the
    traces of requests and attempts. Statements inside a request or an attempt are
    kept."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_ON,
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
    )

    class StatementsInContext(Sampler):
        def __init__(self) -> None:
            self.default = ParentBased(ALWAYS_ON)

        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            links: Any = None,
            trace_state: Any = None,
        ) -> SamplingResult:
            orphan = not trace.get_current_span(parent_context).get_span_context().is_valid
            if orphan and kind == trace.SpanKind.CLIENT:  # set its attributes only later
                return SamplingResult(Decision.DROP)
            return self.default.should_sample(
                parent_context, trace_id, name, kind, attributes, links, trace_state
            )

        def get_description(self) -> str:
            return "StatementsInContext(ParentBased(ALWAYS_ON))"

    return StatementsInContext()


def flush() -> None:
    """Export the spans still buffered (an app or a worker pool ending; the provider
    itself shuts down at process exit)."""
    if not _configured:
        return
    from opentelemetry import trace

    provider: Any = trace.get_tracer_provider()
    with contextlib.suppress(Exception):
        provider.force_flush(5000)


def instrument_app(app: FastAPI) -> None:
    """Server spans for every request but the probes and the metrics scrape."""
    if not _configured:
        return
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    FastAPIInstrumentor.instrument_app(
        app, excluded_urls="livez,readyz,metrics", server_request_hook=_without_query
    )


def _without_query(span: Any, scope: dict[str, Any]) -> None:
    """Keep query strings out of server spans: a download URL's signature is a secret
    (the logs never carry one either), and the path names everything a trace needs."""
    if not scope.get("query_string") or not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    for key in ("http.url", "url.full", "http.target"):
        value = attributes.get(key)
        if isinstance(value, str) and "?" in value:
            span.set_attribute(key, value.split("?", 1)[0])
    if "url.query" in attributes:
        span.set_attribute("url.query", "")


def instrument_engine(engine: AsyncEngine) -> None:
    """One span per SQL statement run through ``engine`` (under the current span): the
    process's main engine (the instrumentor is a process-wide singleton that takes one
    call). Its package declares ``sqlalchemy < 2.1`` but hooks only the core cursor
    events 2.1 keeps, hence ``skip_dep_check`` (``tests/ops/test_tracing.py`` checks
    the spans arrive)."""
    global _engine_instrumented
    if not _configured or _engine_instrumented:
        return
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    SQLAlchemyInstrumentor().instrument(
        engine=engine.sync_engine, enable_commenter=False, skip_dep_check=True
    )
    _engine_instrumented = True


def current_traceparent() -> str | None:
    """The current span's context as a ``traceparent`` (None when tracing is off or no
    span is recording) -- what a job's creation stores."""
    if not _configured:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    value = carrier.get("traceparent")
    return value if value is not None and TRACEPARENT.match(value) else None


def trace_id_of(traceparent: str | None) -> str | None:
    """The 32-hex trace id of a ``traceparent``."""
    found = TRACEPARENT.match(traceparent or "")
    return found.group(1) if found else None


@contextlib.contextmanager
def attempt_span(
    traceparent: str | None, *, job_id: str, attempt_id: str, kind: str, attempt: int
) -> Iterator[None]:
    """Run an attempt in a span parented to its job's creation request (a new trace
    when the job has none); nothing when tracing is off."""
    if not _configured:
        yield
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    parent = (
        TraceContextTextMapPropagator().extract({"traceparent": traceparent})
        if traceparent
        else None
    )
    tracer = trace.get_tracer("atlas.worker")
    attributes: dict[str, str | int] = {
        "atlas.job_id": job_id,
        "atlas.attempt_id": attempt_id,
        "atlas.kind": kind,
        "atlas.attempt": attempt,
    }
    with (
        tracer.start_as_current_span(
            f"attempt {kind}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
        ) as span,
        structlog.contextvars.bound_contextvars(
            trace_id=format(span.get_span_context().trace_id, "032x")
        ),
    ):
        yield  # the attempt's log lines carry its trace id
