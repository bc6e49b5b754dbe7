"""Every server-side CLI failure is ONE clear line on stderr (exit 1), with the
traceback only under ``--debug``: database unreachable, a bad URL, a database not
migrated, a port in use."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO, free_port


def run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def env_with(data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "ATLAS_DATA_DIR": str(data_dir),
        "ATLAS_LOG_FORMAT": "console",
        "ATLAS_STARTUP_WAIT_SECONDS": "0",
        **extra,
    }


def one_line_failure(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith("atlas-jobs: ")
    return lines[0]


@pytest.mark.parametrize("command", [["api"], ["worker"], ["serve", "--workers", "1"]])
def test_a_database_nobody_listens_on_is_named_by_host_and_port(
    command: list[str], data_dir: Path
) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://atlas:hunter2-secret@127.0.0.1:{port}/atlas"
    line = one_line_failure(run(*command, env=env_with(data_dir, DATABASE_URL=url)))
    assert f"127.0.0.1:{port}/atlas" in line
    assert "connection refused" in line
    assert "hunter2" not in line


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("not a url at all", "DATABASE_URL is not a URL"),
        ("mysql://root:hunter2-secret@db/atlas", "unsupported database driver 'mysql'"),
    ],
)
def test_a_bad_database_url_is_one_line_without_its_password(
    url: str, expected: str, data_dir: Path
) -> None:
    done = run("api", env=env_with(data_dir, DATABASE_URL=url))
    line = one_line_failure(done)
    assert expected in line
    assert "hunter2" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["api"],
        ["worker"],
        ["serve"],
        ["keys", "create", "--owner", "ann", "--role", "client"],
        ["keys", "list"],
        ["keys", "end-sessions", "--all"],
    ],
)
def test_servers_and_keys_refuse_an_unmigrated_database_naming_migrate(
    command: list[str], empty_database: str, data_dir: Path
) -> None:
    line = one_line_failure(run(*command, env=env_with(data_dir, DATABASE_URL=empty_database)))
    assert "not migrated" in line
    assert "atlas-jobs migrate" in line


def test_migrate_says_what_it_does_then_the_check_passes(
    empty_database: str, data_dir: Path
) -> None:
    env = env_with(data_dir, DATABASE_URL=empty_database)
    migrated = run("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    database = empty_database.rsplit("/", 1)[1]
    assert "migrating the database at 127.0.0.1:" in migrated.stdout
    assert f"/{database} to head" in migrated.stdout
    assert "database migrated to head" in migrated.stdout
    # The same command that refused it now gets past the schema check, to the port.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_failure(run("api", "--port", str(port), env=env))
    assert "is in use" in line


@pytest.mark.parametrize("command", [["api"], ["serve", "--workers", "0"]])
def test_a_port_in_use_is_one_line_naming_the_way_out(
    command: list[str], database_url: str, data_dir: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_failure(
            run(*command, "--port", str(port), env=env_with(data_dir, DATABASE_URL=database_url))
        )
    assert f"port {port} on 127.0.0.1 is in use" in line
    assert "--port or ATLAS_PORT" in line


def test_a_metrics_port_in_use_names_its_own_option(database_url: str, data_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_failure(
            run(
                "worker",
                "--metrics-port",
                str(port),
                env=env_with(data_dir, DATABASE_URL=database_url),
            )
        )
    assert f"port {port} on 127.0.0.1 is in use; the worker's metrics cannot listen" in line
    assert "--metrics-port" in line


def test_in_production_mode_the_failure_is_one_json_line(data_dir: Path) -> None:
    url = f"postgresql://atlas@127.0.0.1:{free_port()}/atlas"
    done = run("worker", env=env_with(data_dir, DATABASE_URL=url, ATLAS_LOG_FORMAT="json"))
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    event = json.loads(line)
    assert event["event"] == "cli.failed"
    assert "connection refused" in event["message"]


def test_a_database_that_comes_back_is_waited_for(data_dir: Path) -> None:
    """Within ATLAS_STARTUP_WAIT_SECONDS an unreachable database is retried, saying so
    once; past it, the same one-line failure."""
    port = free_port()
    url = f"postgresql://atlas@127.0.0.1:{port}/atlas"
    done = run("worker", env=env_with(data_dir, DATABASE_URL=url, ATLAS_STARTUP_WAIT_SECONDS="2"))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(
        f"atlas-jobs: waiting up to 2 s for the database at 127.0.0.1:{port}"
    )
    assert "connection refused" in lines[1]


def test_debug_shows_the_traceback(data_dir: Path) -> None:
    url = f"postgresql://atlas@127.0.0.1:{free_port()}/atlas"
    done = run("--debug", "worker", env=env_with(data_dir, DATABASE_URL=url))
    assert done.returncode != 0
    assert "Traceback" in done.stderr


def _url_with(url: str, **parts: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(**parts).render_as_string(hide_password=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({"password": "hunter2-wrong"}, 'password authentication failed for user "{user}"'),
        ({"database": "atlas_nowhere"}, 'database "atlas_nowhere" does not exist'),
    ],
)
@pytest.mark.parametrize("command", [["api"], ["worker"], ["migrate"], ["keys", "list"]])
def test_a_refused_login_or_a_missing_database_fails_at_once_naming_the_cause(
    command: list[str], change: dict[str, str], cause: str, database_url: str, data_dir: Path
) -> None:
    """Permanent errors of the driver are not waited for (a wait of 30 s is allowed
    here): one line, the server's own words, never the password."""
    from sqlalchemy.engine import make_url

    url = _url_with(database_url, **change)
    started = time.monotonic()
    done = run(*command, env=env_with(data_dir, DATABASE_URL=url, ATLAS_STARTUP_WAIT_SECONDS="30"))
    assert time.monotonic() - started < 15
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "waiting" not in done.stderr
    assert cause.format(user=make_url(database_url).username) in line
    assert "hunter2" not in done.stderr + done.stdout
    password = make_url(database_url).password
    assert password is None or str(password) not in done.stderr + done.stdout
