"""``atlas-jobs``: one console command for operating and using the service.

The client verbs (:mod:`atlas_jobs._app.cli.client`, ``schedules``, ``webhooks``) talk
HTTP and import nothing of the server; the server's verbs
(:mod:`atlas_jobs._app.cli.server`, ``keys``) import what they run when they run, so
``atlas-jobs --help`` and ``atlas-jobs status ID`` start at once.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Annotated

import typer

from atlas_jobs._app.cli.bulk import bulk_app
from atlas_jobs._app.cli.client import client_app, register_client_verbs
from atlas_jobs._app.cli.failure import CliFailure
from atlas_jobs._app.cli.keys import keys_app
from atlas_jobs._app.cli.pauses import pauses_app
from atlas_jobs._app.cli.schedules import schedules_app
from atlas_jobs._app.cli.server import register_server_verbs
from atlas_jobs._app.cli.webhooks import webhooks_app

app = typer.Typer(
    name="atlas-jobs",
    help="Atlas Jobs: asynchronous request-reply jobs coordinated through PostgreSQL.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
register_server_verbs(app)
app.add_typer(keys_app, name="keys")
app.add_typer(pauses_app, name="pauses")
app.add_typer(schedules_app, name="schedules")
app.add_typer(bulk_app, name="bulk")
app.add_typer(webhooks_app, name="webhooks")
app.add_typer(client_app, name="client", hidden=True)
register_client_verbs(app)


def _unwrapped(docstring: str) -> str:
    """A docstring as help text: each paragraph one line, so the terminal wraps it at
    its own width instead of at the source's line breaks."""
    paragraphs = inspect.cleandoc(docstring).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


def _help_as_sentences(group: typer.Typer) -> None:
    for command in group.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            command.help = _unwrapped(command.callback.__doc__)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _help_as_sentences(sub.typer_instance)


_help_as_sentences(app)

DEBUG = False


@app.callback()
def options(
    debug: Annotated[
        bool,
        typer.Option("--debug", envvar="ATLAS_DEBUG", help="Show tracebacks of failures."),
    ] = False,
) -> None:
    """Atlas Jobs: asynchronous request-reply jobs coordinated through PostgreSQL."""
    global DEBUG
    DEBUG = debug


def main() -> None:
    """The console entry point: a failure is ONE line on stderr and exit code 1; the
    traceback only with ``--debug`` (or ``ATLAS_DEBUG=1``)."""
    try:
        app()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:
        if DEBUG or os.environ.get("ATLAS_DEBUG") in {"1", "true", "yes"}:
            raise
        if isinstance(exc, CliFailure) or _server_failure(exc):
            line = str(exc)
        elif _loaded("pydantic") and isinstance(exc, sys.modules["pydantic"].ValidationError):
            line = "configuration: " + "; ".join(
                f"{'.'.join(str(p) for p in error['loc']) or 'settings'}: {error['msg']}"
                for error in exc.errors()
            )
        else:
            line = f"unexpected {type(exc).__name__} (run with --debug for the traceback)"
        if os.environ.get("ATLAS_LOG_FORMAT") == "json":  # production: every line is JSON
            import json

            typer.echo(
                json.dumps({"event": "cli.failed", "level": "error", "message": line}), err=True
            )
        else:
            typer.echo(f"atlas-jobs: {line}", err=True)
        sys.exit(1)


def _loaded(module: str) -> bool:
    """Whether ``module`` was imported: an exception of its classes needs it loaded, and a
    client verb that never loaded it need not pay for importing it to ask."""
    return module in sys.modules


def _server_failure(exc: Exception) -> bool:
    """A database URL or tracing set-up the user can fix, told by its message alone."""
    if _loaded("atlas_jobs._app.db.engine"):
        from atlas_jobs._app.db.engine import DatabaseUrlError

        if isinstance(exc, DatabaseUrlError):
            return True
    if _loaded("atlas_jobs._app.tracing"):
        from atlas_jobs._app.tracing import TracingUnavailableError

        if isinstance(exc, TracingUnavailableError):
            return True
    return False


if __name__ == "__main__":
    main()
