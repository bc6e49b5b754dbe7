"""The FastAPI application: routers, middleware, error translation, lifespan.

The lifespan opens the database engine (``DATABASE_URL`` or the embedded server), the
LISTEN connection and the feeds (:mod:`atlas_jobs._app.services.feeds`) that serve ``Prefer: wait``
reads
and event streams, the download signer and the result store; it closes them in reverse
order. Once started it freezes the process's start-up heap (:mod:`atlas_jobs._app.heap`), so the
garbage collector's full passes walk only what requests allocate. While shutting down the
app reports not-ready (``/readyz`` 503) so a load balancer stops sending traffic.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.routing import APIRoute

from atlas_jobs._app import __version__, tracing
from atlas_jobs._app.api.docs_pages import install_docs, install_front_door
from atlas_jobs._app.api.errors import install_error_handlers
from atlas_jobs._app.api.metrics import ApiMetrics
from atlas_jobs._app.api.middleware import (
    AnswerUnexpectedErrors,
    BodyGuardMiddleware,
    RequestContextMiddleware,
)
from atlas_jobs._app.api.openapi_doc import install_openapi
from atlas_jobs._app.api.paths import route_template
from atlas_jobs._app.api.queue_sampler import run_sampler
from atlas_jobs._app.api.routers import (
    bulk_operations,
    events,
    health,
    jobs,
    kinds,
    operations,
    pauses,
    results,
    reviews,
    schedules,
    signals,
    webhooks,
)
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.clock import SYSTEM_CLOCK, Clock
from atlas_jobs._app.db import migrations
from atlas_jobs._app.db.engine import create_engine, libpq_url, resolve_database_url
from atlas_jobs._app.heap import freeze_startup_heap
from atlas_jobs._app.services import live_workers
from atlas_jobs._app.services.feeds import FeedHub
from atlas_jobs._app.services.notifier import JobChangeNotifier
from atlas_jobs._app.services.watch_caps import WatcherCaps
from atlas_jobs._app.settings import Settings, get_settings
from atlas_jobs._app.signing import signer_from_settings
from atlas_jobs._app.storage import make_store
from atlas_jobs._app.transitions import Transitions
from atlas_jobs._app.ui import api_error_page, install_ui, ui_templates
from atlas_jobs._app.ui.errors import UI_PREFIX

DESCRIPTION = """\
Asynchronous request-reply jobs. `POST /v1/jobs` answers `202 Accepted` with the
status URL at once; read the job's state, progress, history and result from separate
endpoints. A 200 from the status endpoint is a successful *read*, never a success
signal for the job. Errors are RFC 9457 `application/problem+json`.
"""

TAGS = [
    {"name": "jobs", "description": "Create, read, list and cancel jobs; their history."},
    {"name": "events", "description": "Server-Sent Events of a job's transitions."},
    {"name": "results", "description": "Result references and signed downloads."},
    {"name": "reviews", "description": "Review gates (reviewer role)."},
    {
        "name": "signals",
        "description": "External events for jobs waiting for one (deduplicated by event id).",
    },
    {"name": "operations", "description": "Operator decisions and the queue view."},
    {
        "name": "kinds",
        "description": "The job kinds: versions, input schemas, live workers per version.",
    },
    {"name": "schedules", "description": "Cron triggers: one job per tick, exactly once."},
    {"name": "webhooks", "description": "Completion callbacks: endpoints and deliveries."},
    {"name": "health", "description": "Liveness, readiness, metrics (at the root)."},
]


def operation_id(route: APIRoute) -> str:
    """Stable operationIds: ``<tag>-<route name>`` (``jobs-create``, ``jobs-get``)."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(settings: Settings | None = None, *, clock: Clock | None = None) -> FastAPI:
    settings = settings or get_settings()
    tracing.configure(settings, "atlas-jobs-api")
    clock = clock or SYSTEM_CLOCK
    metrics = ApiMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        url = resolve_database_url(settings)
        engine = create_engine(url, pool_size=settings.db_pool_size, application_name="atlas-api")
        tracing.instrument_engine(engine)
        notifier = JobChangeNotifier(libpq_url(url))
        await notifier.start()
        caps = WatcherCaps(per_key=settings.watch_max_per_key, total=settings.watch_max_total)
        feeds = FeedHub(engine, clock, notifier, caps)
        state = ApiState(
            settings=settings,
            engine=engine,
            clock=clock,
            transitions=Transitions(clock, lease_seconds=settings.lease_seconds),
            notifier=notifier,
            feeds=feeds,
            signer=signer_from_settings(settings),
            store=make_store(settings),
            metrics=metrics,
            migration_heads=migrations.heads(),
        )
        app.state.atlas = state
        notifier.on_keys_revoked = lambda: state.keys.clear()
        sampler = asyncio.create_task(
            run_sampler(
                engine, clock, metrics.queue, every_seconds=settings.metrics_sample_seconds
            ),
            name="metrics-sampler",
        )
        live_workers.install(state.live_workers)
        refresher = asyncio.create_task(
            live_workers.run_refresher(
                engine,
                clock,
                state.live_workers,
                every_seconds=settings.live_workers_refresh_seconds,
                window_seconds=settings.worker_live_window_seconds,
            ),
            name="live-workers",
        )
        freeze_startup_heap()  # full collections walk only what requests allocate
        try:
            yield
        finally:
            state.draining = True
            live_workers.uninstall(state.live_workers)
            sampler.cancel()
            refresher.cancel()
            await asyncio.gather(sampler, refresher, return_exceptions=True)
            await feeds.stop()
            await notifier.stop()
            await engine.dispose()
            tracing.flush()

    app = FastAPI(
        title="Atlas Jobs",
        version=__version__,
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        separate_input_output_schemas=False,
        docs_url=None,  # served by install_docs, without a CDN
        redoc_url=None,
    )
    for router in (
        jobs.batch_router,
        jobs.router,
        events.router,
        results.router,
        reviews.router,
        signals.router,
        operations.router,
        pauses.router,
        bulk_operations.router,
        kinds.router,
        schedules.router,
        webhooks.router,
        health.router,
    ):
        app.include_router(router)
    on_unexpected = install_error_handlers(app, page_for=api_error_page)
    install_ui(app)
    install_openapi(app)
    install_docs(app)
    install_front_door(app)
    pages = ui_templates()

    def templates() -> frozenset[str]:
        return frozenset(app.openapi().get("paths", {})) | pages

    def routed(method: str, path: str) -> bool:
        """False only when ``path`` is an API resource that does not take ``method`` (the
        router answers 405); any other path keeps the body guard (pages, unknown paths)."""
        item = app.openapi().get("paths", {}).get(route_template(path, templates))
        return item is None or method.lower() in item

    app.add_middleware(
        BodyGuardMiddleware,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_seconds=settings.http_body_timeout_seconds,
        max_header_bytes=settings.http_max_header_bytes,
        form_paths=(UI_PREFIX + "/",),
        routed=routed,
    )
    # Inside the request context (added after it is outer): unexpected errors are
    # answered where the access log, the metrics and X-Request-ID see them.
    app.add_middleware(AnswerUnexpectedErrors, handler=on_unexpected)

    app.add_middleware(RequestContextMiddleware, metrics=metrics, templates=templates)
    tracing.instrument_app(app)
    return app
