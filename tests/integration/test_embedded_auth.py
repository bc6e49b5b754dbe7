"""The embedded PostgreSQL never trusts a local account (a reliability finding): SCRAM
password authentication on loopback TCP, the password in a ``0600`` file of the data
directory, and data directories created with ``trust`` upgraded at the next start.

Each test runs its own embedded server in a temporary data directory (whatever server
the rest of the suite uses), and stops it at the end."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from atlas_jobs._app.db import embedded
from atlas_jobs._app.db.engine import libpq_url


@pytest.fixture
def embedded_dir(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "embedded"
    data_dir.mkdir()
    yield data_dir
    embedded.stop(data_dir, mode="immediate")


async def _refused(server: embedded.EmbeddedServer, password: str | None) -> bool:
    try:
        conn = await asyncpg.connect(
            host="127.0.0.1",
            port=server.port,
            user=embedded.SUPERUSER,
            database="postgres",
            password=password,
        )
    except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError):
        return True
    await conn.close()
    return False


async def _assert_password_only(server: embedded.EmbeddedServer, data_dir: Path) -> None:
    secret = embedded.password_file(data_dir)
    info = secret.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()  # the account running Atlas, not the service user
    assert secret.read_text().strip() == server.password
    assert len(server.password) >= 32
    assert "trust" not in (server.pgdata / "pg_hba.conf").read_text()
    # Without the password, or with a wrong one: refused.
    assert await _refused(server, None)
    assert await _refused(server, "")
    assert await _refused(server, server.password + "x")
    # The URL carries the password: every process that resolves it connects.
    conn = await asyncpg.connect(libpq_url(server.url("postgres")))
    try:
        assert await conn.fetchval("SELECT current_user") == embedded.SUPERUSER
    finally:
        await conn.close()


async def test_a_new_embedded_server_asks_for_the_generated_password(
    embedded_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    server = embedded.ensure_running(embedded_dir)
    await _assert_password_only(server, embedded_dir)
    again = embedded.ensure_running(embedded_dir)  # a second process finds it running
    assert (again.port, again.password) == (server.port, server.password)
    restarted = embedded.restart(embedded_dir)
    await _assert_password_only(restarted, embedded_dir)


async def test_a_data_directory_created_with_trust_is_upgraded(
    embedded_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    pgdata = embedded_dir / "pg"
    pgdata.mkdir(mode=0o700)
    embedded._prepare_permissions(pgdata)
    embedded._pg(  # what earlier versions did
        "initdb",
        "-D", str(pgdata),
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
        "-U", embedded.SUPERUSER,
    )  # fmt: skip
    assert "trust" in (pgdata / "pg_hba.conf").read_text()
    server = embedded.ensure_running(embedded_dir)
    await _assert_password_only(server, embedded_dir)
