"""A throwaway pg_auto_failover formation on 127.0.0.1: a monitor, a primary and a
synchronous secondary (Debian's ``postgresql-15-auto-failover``, installed here when
missing), for the failover test.

``pg_autoctl`` refuses to run as root, so every ``pg_autoctl`` and ``postgres`` process
runs as the ``postgres`` system user (the Debian package's) in a temporary directory
that user owns; each ``pg_autoctl`` runs in its own session, so killing its process
group kills the keeper and its services. Postgres children put themselves in sessions of
their own, hence :func:`_kill_postmaster`.

Authentication: pg_auto_failover's own connections (monitor, health checks, streaming
replication) use ``--auth trust``, restricted by its ``pg_hba.conf`` rules to 127.0.0.1
in this throwaway formation; the application's role ``atlas`` logs in with a SCRAM
password (a ``pg_hba.conf`` line before the others), as it would in production.

Failure detection is shortened on the monitor (health checks every second, a node is
unhealthy after 4 s instead of 20 s; the drain before promotion 5 s instead of 30 s)
and the keepers' ``network_partition_timeout`` with it (a primary that loses the monitor
and its standby demotes itself after 2 s, before the 5 s drain ends): the same failover,
faster -- ``docs/operations.md`` section 9 gives the production values.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psutil

from tests.support import free_port

PACKAGE = "postgresql-15-auto-failover"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
DATABASE = "atlas"
APP_ROLE = "atlas"
FORMATION_TIMEOUT = 120.0

# Monitor settings (milliseconds): see the module docstring.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "2000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "4000",
    "pgautofailover.primary_demote_timeout": "5000",
}
KEEPER_NETWORK_PARTITION_TIMEOUT = "2"  # seconds, below primary_demote_timeout


class FormationError(RuntimeError):
    """The formation could not be set up (the message carries the relevant logs)."""


EXTENSION_CONTROL = Path("/usr/share/postgresql/15/extension/pgautofailover.control")
"""The monitor's extension: the package's other half (``pg_autoctl`` alone comes from
``pg-auto-failover-cli``, which can stay installed when the package is removed)."""


def ensure_pg_autoctl() -> str:
    """The ``pg_autoctl`` binary and the PostgreSQL 15 extension it needs, installed with
    apt-get when either is missing."""
    found = shutil.which("pg_autoctl")
    if found and (PG_BIN / "pg_ctl").exists() and EXTENSION_CONTROL.exists():
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise FormationError(f"{PACKAGE} is missing and apt-get (as root) cannot install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", PACKAGE]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:  # a stale package list: refresh it once
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    found = shutil.which("pg_autoctl")
    if done.returncode != 0 or found is None or not EXTENSION_CONTROL.exists():
        raise FormationError(f"apt-get install {PACKAGE} failed:\n{done.stderr[-2000:]}")
    return found


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None


@dataclass
class Formation:
    """Monitor + ``node1`` + ``node2`` (see the module docstring); :meth:`start` builds it."""

    root: Path
    pg_autoctl: str
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12) + "@,:/")
    monitor: Node = field(init=False)
    nodes: dict[str, Node] = field(init=False)
    run_as: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.run_as = "postgres" if os.geteuid() == 0 else None
        self.monitor = self._node("monitor")
        self.nodes = {name: self._node(name) for name in ("node1", "node2")}

    def _node(self, name: str) -> Node:
        return Node(name, free_port(), self.root / name, self.root / f"{name}.log")

    # -- building -----------------------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def start(cls) -> Iterator[Formation]:
        """Set up the formation; tear everything down on exit, whatever happened."""
        pg_autoctl = ensure_pg_autoctl()
        root = Path(tempfile.mkdtemp(prefix="atlas-ha-"))
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        formation = cls(root, pg_autoctl)
        try:
            formation._build()
            yield formation
        finally:
            formation.stop()
            shutil.rmtree(root, ignore_errors=True)

    def _build(self) -> None:
        monitor = self.monitor
        self._spawn(
            monitor,
            ["create", "monitor", "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
             "--run", "--pgctl", str(PG_BIN / "pg_ctl"), "--pgdata", str(monitor.pgdata),
             "--pgport", str(monitor.port)],
        )  # fmt: skip
        self._until(lambda: self._answers(monitor.port, "pg_auto_failover"), "the monitor")
        for name, value in MONITOR_SETTINGS.items():
            self.sql(monitor.port, f"ALTER SYSTEM SET {name} = '{value}'", "pg_auto_failover")
        self.sql(monitor.port, "SELECT pg_reload_conf()", "pg_auto_failover")

        node1, node2 = self.nodes["node1"], self.nodes["node2"]
        self._create_node(node1)
        self._until(lambda: self.states().get("node1") == ("single", "single"), "node1 single")
        self._add_application_role(node1)
        self._create_node(node2)
        # pg_basebackup asks for a spread checkpoint (minutes at the default
        # checkpoint_timeout); an explicit CHECKPOINT on the primary completes it now.
        self._until(
            lambda: self._checkpoint(node1) and self.states().get("node2", ("",))[0] == "secondary",
            "node2 secondary",
        )
        self._until(lambda: self.states().get("node1") == ("primary", "primary"), "node1 primary")
        for node in (node1, node2):
            setting = ("timeout.network_partition_timeout", KEEPER_NETWORK_PARTITION_TIMEOUT)
            self.autoctl("config", "set", "--pgdata", str(node.pgdata), *setting)

    def _create_node(self, node: Node) -> None:
        self._spawn(
            node,
            ["create", "postgres", "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
             "--auth", "trust", "--no-ssl", "--replication-quorum", "true",
             "--candidate-priority", "50", "--run", "--pgctl", str(PG_BIN / "pg_ctl"),
             "--pgdata", str(node.pgdata),
             "--pgport", str(node.port), "--name", node.name, "--dbname", DATABASE,
             "--monitor", self.monitor_uri],
        )  # fmt: skip

    def _add_application_role(self, node: Node) -> None:
        """The ``atlas`` role with a SCRAM password, owner of the database; its
        ``pg_hba.conf`` line comes first. The secondary's base backup copies both."""
        escaped = self.password.replace("'", "''")
        self.sql(node.port, f"CREATE ROLE {APP_ROLE} LOGIN PASSWORD '{escaped}'")
        self.sql(node.port, f"ALTER DATABASE {DATABASE} OWNER TO {APP_ROLE}")
        hba = node.pgdata / "pg_hba.conf"
        line = f"host {DATABASE} {APP_ROLE} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(line + hba.read_text())
        self.sql(node.port, "SELECT pg_reload_conf()")

    def _checkpoint(self, node: Node) -> bool:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.sql(node.port, "CHECKPOINT")
        return True

    # -- reading ------------------------------------------------------------------------

    @property
    def monitor_uri(self) -> str:
        port = self.monitor.port
        return f"postgres://autoctl_node@127.0.0.1:{port}/pg_auto_failover?sslmode=disable"

    def database_url(self) -> str:
        """What ``pg_autoctl show uri --formation default`` prints -- every node, in the
        libpq multi-host form with ``target_session_attrs=read-write`` -- with the
        application's credentials added."""
        uri = self.autoctl("show", "uri", "--formation", "default", "--monitor", self.monitor_uri)
        assert uri.startswith("postgres://"), uri
        return uri.replace(
            "postgres://", f"postgres://{APP_ROLE}:{quote(self.password, safe='')}@", 1
        )

    def states(self) -> dict[str, tuple[str, str]]:
        """``{node: (reported state, goal state)}`` as the monitor sees them."""
        rows = self.sql(
            self.monitor.port,
            "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node",
            "pg_auto_failover",
        )
        return {name: (reported, goal) for name, reported, goal in (r.split("|") for r in rows)}

    def primary(self) -> Node:
        for name, (reported, _goal) in self.states().items():
            if reported in {"primary", "wait_primary", "single"}:
                return self.nodes[name]
        raise FormationError(f"no primary: {self.states()}")

    def replication(self, node: Node) -> tuple[str, list[str]]:
        """(``synchronous_standby_names``, the ``sync_state`` of each standby) on ``node``."""
        names = self.sql(node.port, "SHOW synchronous_standby_names")[0]
        states = self.sql(node.port, "SELECT sync_state FROM pg_stat_replication")
        return names, states

    def writable(self, node: Node) -> bool:
        try:
            rows = self.sql(
                node.port,
                "SELECT pg_is_in_recovery(), current_setting('default_transaction_read_only')",
            )
        except subprocess.CalledProcessError:
            return False
        return rows == ["f|off"]

    def logs(self) -> str:
        parts = []
        for node in (self.monitor, *self.nodes.values()):
            text = node.log.read_text(errors="replace") if node.log.exists() else ""
            parts.append(f"--- {node.name} ---\n{text[-3000:]}")
        return "\n".join(parts)

    # -- breaking -----------------------------------------------------------------------

    def kill(self, node: Node) -> None:
        """``kill -9`` the node's keeper (its whole process group) and its Postgres."""
        if node.process is not None and node.process.poll() is None:
            os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait()
        _kill_postmaster(node.pgdata)

    def stop(self) -> None:
        """``pg_autoctl stop --immediate`` everywhere (it only signals the service: all
        stop together), then kill whatever is left."""
        for node in (*self.nodes.values(), self.monitor):
            if node.process is not None and node.process.poll() is None:
                with contextlib.suppress(Exception):
                    self.autoctl("stop", "--immediate", "--pgdata", str(node.pgdata), timeout=20)
        for node in (*self.nodes.values(), self.monitor):
            if node.process is not None and node.process.poll() is None:
                try:
                    node.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(node.process.pid, signal.SIGKILL)
                    node.process.wait()
            _kill_postmaster(node.pgdata)

    # -- plumbing -----------------------------------------------------------------------

    @property
    def _env(self) -> dict[str, str]:
        return {
            "PATH": f"{PG_BIN}:/usr/bin:/bin",
            "PG_CONFIG": str(PG_BIN / "pg_config"),
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_DATA_HOME": str(self.root / "share"),
            "LANG": "C.UTF-8",
        }

    def _spawn(self, node: Node, args: list[str]) -> None:
        with node.log.open("wb") as log:
            node.process = subprocess.Popen(
                [self.pg_autoctl, *args],
                cwd=self.root,
                env=self._env,
                user=self.run_as,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def autoctl(self, *args: str, timeout: float = 30) -> str:
        done = subprocess.run(
            [self.pg_autoctl, *args],
            cwd=self.root,
            env=self._env,
            user=self.run_as,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise FormationError(f"pg_autoctl {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout.strip()

    def sql(self, port: int, statement: str, database: str = DATABASE) -> list[str]:
        """Rows of one statement as the ``postgres`` superuser (trust on 127.0.0.1)."""
        done = subprocess.run(
            [str(PG_BIN / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
             "-p", str(port), "-U", "postgres", "-d", database, "-c", statement],
            capture_output=True, text=True, timeout=15, check=True,
            env={**self._env, "PGCONNECT_TIMEOUT": "3"},
        )  # fmt: skip
        return [line for line in done.stdout.splitlines() if line]

    def _answers(self, port: int, database: str) -> bool:
        try:
            self.sql(port, "SELECT 1", database)
        except subprocess.CalledProcessError:
            return False
        return True

    def _until(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + FORMATION_TIMEOUT
        while True:
            with contextlib.suppress(subprocess.CalledProcessError, FormationError):
                if condition():
                    return
            for node in (self.monitor, *self.nodes.values()):
                if node.process is not None and node.process.poll() is not None:
                    raise FormationError(
                        f"{node.name} exited while waiting for {what}:\n{self.logs()}"
                    )
            if time.monotonic() > deadline:
                raise FormationError(f"timed out waiting for {what}:\n{self.logs()}")
            time.sleep(0.3)


def _kill_postmaster(pgdata: Path) -> None:
    """SIGKILL the postmaster of ``pgdata`` (from ``postmaster.pid``) and its children."""
    pid_file = pgdata / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().splitlines()[0])
        postmaster = psutil.Process(pid)
        if str(pgdata) not in " ".join(postmaster.cmdline()):
            return  # a recycled pid: not ours
        victims = [postmaster, *postmaster.children(recursive=True)]
    except (OSError, ValueError, IndexError, psutil.Error):
        return
    for process in victims:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(victims, timeout=10)
