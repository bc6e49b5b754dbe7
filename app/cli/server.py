"""The server's verbs: ``migrate``, ``serve``, ``api``, ``worker``, ``db ...``,
``openapi`` and the development helpers (``dev-destination``, ``dev-webhook``).

Nothing of the server is imported at module level: each verb imports what it runs, so
registering these verbs costs the client verbs (and ``--help``) nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from atlas_jobs._app.addresses import DEFAULT_HOST, DEFAULT_PORT, bind_url

if TYPE_CHECKING:
    from atlas_jobs._app.settings import Settings

# Registered on the top-level command by :func:`register_server_verbs`.
server_app = typer.Typer()


def get_settings() -> Settings:
    """The server's settings (pydantic-settings), loaded by the verb that needs them."""
    from atlas_jobs._app.settings import get_settings as load

    return load()


db_app = typer.Typer(help="The database in use (embedded unless DATABASE_URL is set).")


def database_url() -> str:
    from atlas_jobs._app.cli.preflight import database_url as resolve

    return resolve()


@db_app.command("url")
def db_url(
    libpq: Annotated[bool, typer.Option(help="Print a libpq URL (for psql).")] = False,
) -> None:
    """Print the database URL in use, starting the embedded server if needed."""
    from atlas_jobs._app.db.engine import libpq_url

    url = database_url()
    typer.echo(libpq_url(url) if libpq else url)


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL server (no-op with DATABASE_URL)."""
    from atlas_jobs._app.db import embedded

    settings = get_settings()
    if settings.database_url:
        typer.echo("DATABASE_URL is set; nothing embedded to stop")
        return
    embedded.stop(settings.data_dir)


@server_app.command()
def migrate(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply database migrations (alembic upgrade) shipped with this installation."""
    from alembic import command

    from atlas_jobs._app.cli.failure import CliFailure
    from atlas_jobs._app.cli.preflight import reason, where
    from atlas_jobs._app.db import migrations

    url = database_url()
    typer.echo(f"migrating the database at {where(url)} to {revision} ...")
    try:
        command.upgrade(migrations.alembic_config(url), revision)
    except Exception as exc:
        raise CliFailure(f"migration failed at {where(url)}: {reason(exc)}") from exc
    typer.echo(f"database migrated to {revision} ({', '.join(sorted(migrations.heads()))})")


# The status page's job list (app/ui/routes.py "ui-jobs"; `/` redirects there too).
STATUS_PAGE_PATH = "/ui/jobs"
FIRST_KEY_COMMAND = "atlas-jobs keys create --owner NAME --role client"

HostOption = Annotated[str, typer.Option(envvar=["ATLAS_HOST", "HOST"], help="Interface to bind.")]
PortOption = Annotated[int, typer.Option(envvar=["ATLAS_PORT", "PORT"], help="TCP port.")]
KindsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--kinds",
        help=(
            "A module of your own that declares job kinds (repeat it, or separate modules "
            "with commas); added to ATLAS_KINDS for this process and those it starts."
        ),
    ),
]


def load_kinds(modules: list[str] | None) -> None:
    """Load the declared kinds now (before anything is served), adding ``modules`` to
    ``ATLAS_KINDS`` so the processes started from here load the same ones. A module
    that fails to import, or a kind declared twice, is one line and exit code 1."""
    from atlas_jobs._app.cli.failure import CliFailure
    from atlas_jobs._app.kinds import KINDS, KindLoadError
    from atlas_jobs._app.kinds.registry import KINDS_VARIABLE, load

    if modules:
        named = [m.strip() for item in modules for m in item.split(",") if m.strip()]
        before = [m for m in os.environ.get(KINDS_VARIABLE, "").split(",") if m.strip()]
        os.environ[KINDS_VARIABLE] = ",".join(dict.fromkeys([*before, *named]))
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a project's own package, as `python -m` finds it
    try:
        KINDS.use(load())
    except KindLoadError as exc:
        raise CliFailure(str(exc)) from None


@server_app.command()
def api(
    host: HostOption = DEFAULT_HOST, port: PortOption = DEFAULT_PORT, kinds: KindsOption = None
) -> None:
    """Serve the HTTP API alone (run workers separately with `atlas-jobs worker`)."""
    load_kinds(kinds)
    from atlas_jobs._app.api.main import create_app
    from atlas_jobs._app.api.serving import run_api
    from atlas_jobs._app.cli.preflight import migrated_database_url, require_free_port
    from atlas_jobs._app.logs import configure_logging

    settings = get_settings()
    if settings.public_url is None:
        settings = settings.model_copy(update={"public_url": bind_url(host, port)})
    url = migrated_database_url(wait=True)
    require_free_port(host, port)
    configure_logging(settings)
    os.environ["DATABASE_URL"] = url
    run_api(create_app(settings), settings, host=host, port=port)


@server_app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once.")] = 4,
    worker_id: Annotated[str | None, typer.Option(help="Name shown in leases.")] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve this worker's Prometheus metrics on this port.")
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface for --metrics-port.")] = (
        DEFAULT_HOST
    ),
    kinds: KindsOption = None,
) -> None:
    """Run a worker process: claims jobs, heartbeats, reaps expired leases."""
    load_kinds(kinds)
    from atlas_jobs._app.cli.preflight import migrated_database_url, require_free_port
    from atlas_jobs._app.logs import configure_logging
    from atlas_jobs._app.services.views import status_document
    from atlas_jobs._workers.pool import run_worker

    settings = get_settings()
    url = migrated_database_url(wait=True)
    configure_logging(settings)
    os.environ["DATABASE_URL"] = url
    if metrics_port is not None:
        from atlas_jobs._app.metrics import serve_worker_metrics

        require_free_port(
            metrics_host, metrics_port, what="the worker's metrics", choose="--metrics-port"
        )
        serve_worker_metrics(metrics_host, metrics_port)
    run_worker(
        settings, concurrency=concurrency, worker_id=worker_id, render_status=status_document
    )


@server_app.command()
def serve(
    host: HostOption = DEFAULT_HOST,
    port: PortOption = DEFAULT_PORT,
    workers: Annotated[int, typer.Option(min=0, help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs per worker process.")] = 4,
    kinds: KindsOption = None,
) -> None:
    """Serve the API and a pool of worker processes together.

    Each child runs in its own process group, so a terminal's Ctrl-C or a SIGTERM reaches
    them exactly once, forwarded from here (a second signal would cut their graceful
    shutdown short). If any child dies on its own, the others are stopped too and the
    exit code is non-zero: a half-running service is not left behind.
    """
    load_kinds(kinds)
    settings = get_settings()
    with embedded_server_of_this_run(settings) as served:
        _serve(host, port, workers, concurrency, settings, served)


@contextmanager
def embedded_server_of_this_run(settings: Settings) -> Iterator[list[bool]]:
    """Around a ``serve``: the embedded PostgreSQL it had to start is stopped when it
    ends -- stopped, refused or failed -- and one it found running is left running,
    said plainly once the service has run (with how to stop it). Yields a flag the
    caller sets once the service has started. Nothing with ``DATABASE_URL``."""
    served = [False]
    if settings.database_url:
        yield served
        return
    from atlas_jobs._app.db import embedded

    where = settings.data_dir
    started_here = not embedded.is_running(where)
    try:
        yield served
    finally:
        if started_here and embedded.is_running(where):
            embedded.stop(where)
            _say(
                settings,
                "serve.embedded_stopped",
                f"stopped the embedded PostgreSQL under {where} (this serve started it)",
                data_dir=str(where),
            )
        elif served[0] and embedded.is_running(where):
            _say(
                settings,
                "serve.embedded_running",
                f"the embedded PostgreSQL under {where} keeps running (it ran before this "
                "serve started); stop it with: atlas-jobs db stop",
                data_dir=str(where),
            )


def _serve(
    host: str, port: int, workers: int, concurrency: int, settings: Settings, served: list[bool]
) -> None:
    from atlas_jobs._app.cli.preflight import migrated_database_url, require_free_port, where

    url = migrated_database_url(wait=True)
    require_free_port(host, port)
    served[0] = True
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    # Workers write their metrics to files here (prometheus-client's multiprocess
    # mode); the API adds them to its /metrics. A fresh directory per run.
    metrics_dir = tempfile.mkdtemp(prefix="atlas-metrics-")
    command = [sys.executable, "-m", "atlas_jobs._app.cli"]
    worker_env = {**env, "PROMETHEUS_MULTIPROC_DIR": metrics_dir}
    processes = [
        subprocess.Popen(  # noqa: S603 - our own entry point
            [*command, "api", "--host", host, "--port", str(port)],
            env={**env, "ATLAS_WORKER_METRICS_DIR": metrics_dir},
            process_group=0,
        ),
        *(
            subprocess.Popen(  # noqa: S603
                [
                    *command,
                    "worker",
                    "--concurrency",
                    str(concurrency),
                    "--worker-id",
                    f"serve-{n}",
                ],
                env=worker_env,
                process_group=0,
            )
            for n in range(workers)
        ),
    ]
    base = bind_url(host, port)
    _say(
        settings,
        "serve.started",
        f"Atlas Jobs: API {base}/v1 (health {base}/livez {base}/readyz, metrics "
        f"{base}/metrics, docs {base}/docs); {workers} worker process(es) x {concurrency} "
        f"job(s); database {where(url)}\n"
        f"status page {base}{STATUS_PAGE_PATH}; a first API key: {FIRST_KEY_COMMAND}",
        api=f"{base}/v1",
        readyz=f"{base}/readyz",
        metrics=f"{base}/metrics",
        status_page=f"{base}{STATUS_PAGE_PATH}",
        first_key=FIRST_KEY_COMMAND,
        workers=workers,
        concurrency=concurrency,
        database=where(url),
        public_url=settings.public_url or base,
    )
    stopping = False

    def stop(signum: int, _frame: object = None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        for process in processes:
            if process.poll() is None:
                process.send_signal(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while all(process.poll() is None for process in processes):
        time.sleep(0.2)
    unexpected = not stopping
    stop(signal.SIGTERM)
    codes = [process.wait() for process in processes]
    shutil.rmtree(metrics_dir, ignore_errors=True)
    # A child stopped by the signal we forwarded ended cleanly: uvicorn re-raises it
    # (-N), the console command exits 128 + N on Ctrl-C's KeyboardInterrupt.
    clean = {0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGINT, 128 + signal.SIGTERM}
    if unexpected or any(code not in clean for code in codes):
        _say(
            settings,
            "serve.child_exited",
            f"serve: a process exited unexpectedly (exit codes {codes})",
            exit_codes=codes,
        )
        raise typer.Exit(1)


@server_app.command("dev-destination")
def dev_destination(
    host: Annotated[str, typer.Option(help="Bind address.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port.")] = 8900,
    data: Annotated[
        Path, typer.Option(help="SQLite file of applied publications (durable).")
    ] = Path(".atlas/dev-destination.sqlite3"),
) -> None:
    """Run the test destination (publications, scripted failures) for demos and tests."""
    import asyncio

    from atlas_jobs._app.devtools.destination import serve as serve_destination

    data.parent.mkdir(parents=True, exist_ok=True)
    typer.echo(f"test destination on http://{host}:{port} (record: {data})")
    asyncio.run(serve_destination(host, port, data))


@server_app.command("dev-webhook")
def dev_webhook(
    host: Annotated[str, typer.Option(help="Bind address.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port.")] = 8901,
    secret: Annotated[
        str | None,
        typer.Option(
            envvar="ATLAS_DEV_WEBHOOK_SECRET",
            help="The endpoint's signing secret (whsec_...): verify each delivery with it.",
        ),
    ] = None,
    log: Annotated[
        Path | None, typer.Option(help="Also append each delivery (headers, body) as JSON.")
    ] = None,
) -> None:
    """Receive completion callbacks on this machine and print one line per delivery
    (for trying webhooks offline: register http://localhost:PORT/ as an endpoint; `make
    run` lets webhooks reach localhost)."""
    from atlas_jobs._app.devtools.webhook_receiver import serve as serve_receiver

    serve_receiver(host, port, secret=secret, log=log)


def _say(settings: Settings, event: str, line: str, **fields: object) -> None:
    """A line for the person at the terminal, or one JSON log line in production
    (``ATLAS_LOG_FORMAT=json``: every line a process writes is then JSON)."""
    if settings.log_format == "json":
        from atlas_jobs._app.logs import configure_logging, get_logger

        configure_logging(settings)
        get_logger("atlas.serve").info(event, **fields)
    else:
        typer.echo(line)


@server_app.command()
def openapi(
    output: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
    kinds: KindsOption = None,
) -> None:
    """Print (or write) the OpenAPI document generated from the app: each loaded kind's
    input is a schema of its own (a union discriminated by `kind`)."""
    load_kinds(kinds)
    from atlas_jobs._app.api.openapi_doc import render_openapi

    text = render_openapi()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        typer.echo(f"wrote {output}")


def register_server_verbs(app: typer.Typer) -> None:
    """Attach the server's verbs (and the ``db`` group) to the top-level command."""
    app.add_typer(db_app, name="db")
    for command in server_app.registered_commands:
        app.registered_commands.append(command)
