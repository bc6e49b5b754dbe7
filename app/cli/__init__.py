"""``atlas-jobs``: one console command for operating and using the service."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from app.cli.client import client_app, register_client_verbs
from app.cli.keys import keys_app
from app.cli.schedules import schedules_app
from app.cli.webhooks import webhooks_app
from app.settings import DEFAULT_HOST, DEFAULT_PORT, bind_url, get_settings

app = typer.Typer(
    name="atlas-jobs",
    help="Atlas Jobs: asynchronous request-reply jobs coordinated through PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
db_app = typer.Typer(help="The database in use (embedded unless DATABASE_URL is set).")
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(schedules_app, name="schedules")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(client_app, name="client", hidden=True)
register_client_verbs(app)

REPO_ROOT = Path(__file__).resolve().parents[2]


def alembic_root() -> Path:
    """Where alembic.ini lives: the source checkout, else the working directory."""
    for candidate in (REPO_ROOT, Path.cwd()):
        if (candidate / "alembic.ini").is_file():
            return candidate
    raise typer.BadParameter("alembic.ini not found; run from the Atlas Jobs checkout")


def database_url() -> str:
    from app.db.engine import resolve_database_url

    return resolve_database_url(get_settings())


@db_app.command("url")
def db_url(
    libpq: Annotated[bool, typer.Option(help="Print a libpq URL (for psql).")] = False,
) -> None:
    """Print the database URL in use, starting the embedded server if needed."""
    from app.db.engine import libpq_url

    url = database_url()
    typer.echo(libpq_url(url) if libpq else url)


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL server (no-op with DATABASE_URL)."""
    from app.db import embedded

    settings = get_settings()
    if settings.database_url:
        typer.echo("DATABASE_URL is set; nothing embedded to stop")
        return
    embedded.stop(settings.data_dir)


@app.command()
def migrate(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply database migrations (alembic upgrade)."""
    from alembic import command
    from alembic.config import Config

    root = alembic_root()
    config = Config(str(root / "alembic.ini"))
    config.set_main_option("script_location", str(root / "alembic"))
    config.set_main_option("sqlalchemy.url", database_url().replace("%", "%%"))
    command.upgrade(config, revision)
    typer.echo(f"database migrated to {revision}")


@app.command()
def api(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="TCP port.")] = DEFAULT_PORT,
) -> None:
    """Serve the HTTP API alone (run workers separately with `atlas-jobs worker`)."""
    import uvicorn

    from app.api.main import create_app
    from app.api.middleware import ContainAnsweredErrors
    from app.logs import configure_logging

    settings = get_settings()
    if settings.public_url is None:
        settings = settings.model_copy(update={"public_url": bind_url(host, port)})
    configure_logging(settings)
    os.environ["DATABASE_URL"] = database_url()
    uvicorn.run(
        ContainAnsweredErrors(create_app(settings)),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) or None,
        # Bounds for clients without a key (README "HTTP limits"). h11, not httptools:
        # only h11 bounds the size of the request line and headers.
        http="h11",
        h11_max_incomplete_event_size=settings.http_max_header_bytes,
        limit_concurrency=settings.http_limit_concurrency,
        timeout_keep_alive=settings.http_keep_alive_seconds,
    )


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs run at once.")] = 4,
    worker_id: Annotated[str | None, typer.Option(help="Name shown in leases.")] = None,
) -> None:
    """Run a worker process: claims jobs, heartbeats, reaps expired leases."""
    from app.api.views import status_document
    from app.logs import configure_logging
    from workers.pool import run_worker

    settings = get_settings()
    configure_logging(settings)
    os.environ["DATABASE_URL"] = database_url()
    run_worker(
        settings, concurrency=concurrency, worker_id=worker_id, render_status=status_document
    )


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="TCP port.")] = DEFAULT_PORT,
    workers: Annotated[int, typer.Option(min=0, help="Worker processes.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Jobs per worker process.")] = 4,
) -> None:
    """Serve the API and a pool of worker processes together.

    Each child runs in its own process group, so a terminal's Ctrl-C or a SIGTERM reaches
    them exactly once, forwarded from here (a second signal would cut their graceful
    shutdown short). If any child dies on its own, the others are stopped too and the
    exit code is non-zero: a half-running service is not left behind.
    """
    env = {**os.environ, "DATABASE_URL": database_url()}
    command = [sys.executable, "-m", "app.cli"]
    processes = [
        subprocess.Popen(  # noqa: S603 - our own entry point
            [*command, "api", "--host", host, "--port", str(port)], env=env, process_group=0
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
                env=env,
                process_group=0,
            )
            for n in range(workers)
        ),
    ]
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
    # A child stopped by the signal we forwarded ended cleanly (uvicorn re-raises it).
    clean = {0, -signal.SIGTERM, -signal.SIGINT}
    if unexpected or any(code not in clean for code in codes):
        typer.echo(f"serve: a process exited unexpectedly (exit codes {codes})", err=True)
        raise typer.Exit(1)


@app.command()
def openapi(
    output: Annotated[Path | None, typer.Option(help="Write here instead of stdout.")] = None,
) -> None:
    """Print (or write) the OpenAPI document generated from the app."""
    from app.api.openapi_doc import render_openapi

    text = render_openapi()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        typer.echo(f"wrote {output}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
