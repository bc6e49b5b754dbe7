"""Checks a server command makes before it starts, each failing with ONE clear line.

``serve``, ``api`` and ``worker`` refuse to start against a database they cannot reach,
one that is not migrated or is at another schema than the installed code expects, or a
port already taken. :class:`CliFailure` carries the line; ``atlas_jobs._app.cli.main`` prints it
(with the traceback only under ``--debug``).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
import time

import asyncpg

from atlas_jobs._app.cli.failure import CliFailure
from atlas_jobs._app.db.engine import create_engine, describe_url, resolve_database_url
from atlas_jobs._app.db.migrations import SchemaStatus, schema_status
from atlas_jobs._app.settings import get_settings

CONNECT_TIMEOUT_SECONDS = 15.0


def where(url: str) -> str:
    """``host:port/database`` of a URL (every host of a multi-host one) -- never its user
    or password."""
    return describe_url(url)


def driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception behind ``exc``: SQLAlchemy wraps asyncpg's errors in
    its DBAPI adaptor (``exc.orig``, whose class says only ``Error``), the original
    being that adaptor's ``__cause__``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError | TimeoutError) or type(current).__module__.startswith(
            "asyncpg."
        ):
            return current
        current = getattr(current, "orig", None) or current.__cause__ or current.__context__
    root: BaseException = getattr(exc, "orig", None) or exc
    return root


# A login the server refused (28000, 28P01) or a database it does not have (3D000):
# waiting changes neither, so they fail at once.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.InvalidAuthorizationSpecificationError,
    asyncpg.InvalidCatalogNameError,
)


def is_permanent(exc: BaseException) -> bool:
    return isinstance(driver_error(exc), PERMANENT_ERRORS)


def reason(exc: BaseException) -> str:
    root = driver_error(exc)
    name = type(root).__name__
    if isinstance(root, PERMANENT_ERRORS):
        # The server's words ('password authentication failed for user "x"', 'database
        # "y" does not exist'): they name the user or the database, never a password.
        said = str(root).strip().splitlines()
        return said[0] if said else name
    if isinstance(root, ConnectionRefusedError) or "ConnectionRefused" in name:
        return "connection refused (is PostgreSQL running there?)"
    if isinstance(root, socket.gaierror):
        return "unknown host"
    if isinstance(root, TimeoutError):
        return "no answer (timed out)"
    if isinstance(root, asyncpg.CannotConnectNowError):
        return "the server is starting up or shutting down"
    if "TargetServerAttributeNotMatched" in name:
        return "no host accepts writes (target_session_attrs=read-write): a failover in progress?"
    if isinstance(root, asyncpg.PostgresError) and root.sqlstate:
        return f"{name} (SQLSTATE {root.sqlstate})"
    return name


async def _status(url: str) -> SchemaStatus:
    engine = create_engine(url, pool_size=1, max_overflow=0, application_name="atlas-preflight")
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS), engine.connect() as conn:
            return await schema_status(conn)
    finally:
        await engine.dispose()


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
            if time.monotonic() + pause > deadline or is_permanent(exc):
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


def database_url() -> str:
    """The database URL in use, starting the embedded server unless ``DATABASE_URL``."""
    settings = get_settings()
    try:
        return resolve_database_url(settings)
    except RuntimeError as exc:  # the embedded server's own messages (no secrets in them)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CliFailure(
            f"the embedded PostgreSQL under {settings.data_dir} did not start: {first}"
        ) from exc


def migrated_database_url(*, wait: bool = False) -> str:
    """The database URL for a command that needs the migrated schema (``serve``,
    ``api``, ``worker``, ``keys ...``): one check, so every such command gives the
    same advice (``atlas-jobs migrate``) for a database that is not migrated. ``wait``:
    wait ``ATLAS_STARTUP_WAIT_SECONDS`` for a database that does not answer yet (the
    servers); a one-shot command fails at once."""
    url = database_url()
    require_current_schema(url, wait_seconds=get_settings().startup_wait_seconds if wait else 0)
    return url


def require_free_port(
    host: str, port: int, *, what: str = "the API", choose: str = "--port or ATLAS_PORT"
) -> None:
    """Nothing listens on ``host:port`` yet (uvicorn would log a bind error and exit);
    a port in use names how to choose another (``choose``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliFailure(
                    f"port {port} on {host} is in use; {what} cannot listen (choose another "
                    f"port with {choose}, or stop what listens there)"
                ) from exc
            raise CliFailure(f"cannot listen on {host}:{port} for {what}: {exc.strerror}") from exc
