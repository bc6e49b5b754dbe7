"""Checks a server command makes before it starts, each failing with ONE clear line.

``serve``, ``api`` and ``worker`` refuse to start against a database they cannot reach,
one that is not migrated or is at another schema than the installed code expects, or a
port already taken. :class:`CliFailure` carries the line; ``atlas_jobs._app.cli.main`` prints it
(with the traceback only under ``--debug``).
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import socket
import sys
import time

from atlas_jobs._app.db.engine import create_engine, describe_url
from atlas_jobs._app.db.migrations import SchemaStatus, schema_status

CONNECT_TIMEOUT_SECONDS = 15.0


class CliFailure(Exception):  # noqa: N818 - an outcome for the user, not a program error
    """A failure the user can act on, told in one line."""


def where(url: str) -> str:
    """``host:port/database`` of a URL (every host of a multi-host one) -- never its user
    or password."""
    return describe_url(url)


def reason(exc: BaseException) -> str:
    root = getattr(exc, "orig", None) or exc
    name = type(root).__name__
    if isinstance(root, ConnectionRefusedError) or "ConnectionRefused" in name:
        return "connection refused (is PostgreSQL running there?)"
    if isinstance(root, socket.gaierror):
        return "unknown host"
    if isinstance(root, TimeoutError):
        return "no answer (timed out)"
    if "InvalidPassword" in name or "InvalidAuthorization" in name:
        return f"the login was refused ({name})"
    if "InvalidCatalogName" in name:
        return "that database does not exist"
    if "TargetServerAttributeNotMatched" in name:
        return "no host accepts writes (target_session_attrs=read-write): a failover in progress?"
    return name


async def _status(url: str) -> SchemaStatus:
    engine = create_engine(url, pool_size=1, max_overflow=0, application_name="atlas-preflight")
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS), engine.connect() as conn:
            return await schema_status(conn)
    finally:
        await engine.dispose()


PERMANENT = ("InvalidPassword", "InvalidAuthorization", "InvalidCatalogName")


def require_current_schema(url: str, *, wait_seconds: float = 0.0) -> None:
    """The database answers and its schema is the one this installation expects.

    A database that does not answer is waited for up to ``wait_seconds``
    (``ATLAS_STARTUP_WAIT_SECONDS``): processes started while it restarts come up by
    themselves. A refused login, a missing database or a wrong schema fail at once."""
    deadline = time.monotonic() + wait_seconds
    pause = 0.5
    told = False
    while True:
        try:
            status = asyncio.run(_status(url))
            break
        except Exception as exc:
            name = type(getattr(exc, "orig", None) or exc).__name__
            if time.monotonic() + pause > deadline or any(p in name for p in PERMANENT):
                raise CliFailure(f"cannot use the database at {where(url)}: {reason(exc)}") from exc
            if not told:
                print(
                    f"atlas-jobs: waiting up to {wait_seconds:.0f} s for the database at "
                    f"{where(url)} ({reason(exc)})",
                    file=sys.stderr,
                    flush=True,
                )
                told = True
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
    problem = status.problem()
    if problem is not None:
        raise CliFailure(f"{problem} (database {where(url)})")


def _tell(line: str) -> None:
    """One line on stderr: JSON in production (``ATLAS_LOG_FORMAT=json``)."""
    if os.environ.get("ATLAS_LOG_FORMAT") == "json":
        text = json.dumps({"event": "cli.waiting", "level": "warning", "message": line})
    else:
        text = f"atlas-jobs: {line}"
    print(text, file=sys.stderr, flush=True)


def require_free_port(host: str, port: int, *, what: str = "the API") -> None:
    """Nothing listens on ``host:port`` yet (uvicorn would log a bind error and exit)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliFailure(f"port {port} on {host} is in use; {what} cannot listen") from exc
            raise CliFailure(f"cannot listen on {host}:{port} for {what}: {exc.strerror}") from exc
