"""``DATABASE_URL`` spellings: one host or several (libpq's comma form, what
``pg_autoctl show uri`` prints, or SQLAlchemy's repeated ``host=``), each turned into
the URL SQLAlchemy's asyncpg dialect takes and back into the one asyncpg and psql take."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import make_url

from atlas_jobs._app.cli.preflight import where
from atlas_jobs._app.db.engine import DatabaseUrlError, database_hosts, libpq_url, normalize_url

FAILOVER = (
    "postgres://atlas:p%40ss%2Cword@10.0.0.1:5432,10.0.0.2:6432/atlas"
    "?target_session_attrs=read-write&sslmode=prefer"
)


def test_a_libpq_multi_host_url_becomes_sqlalchemys_and_reaches_asyncpg_whole() -> None:
    url = normalize_url(FAILOVER)
    assert url.startswith("postgresql+asyncpg://")
    assert database_hosts(url) == [("10.0.0.1", 5432), ("10.0.0.2", 6432)]
    _, kwargs = asyncpg_dialect().create_connect_args(make_url(url))
    assert kwargs["host"] == ["10.0.0.1", "10.0.0.2"]
    assert kwargs["port"] == [5432, 6432]
    assert kwargs["target_session_attrs"] == "read-write"
    assert kwargs["ssl"] == "prefer"  # asyncpg's name for libpq's sslmode
    assert kwargs["password"] == "p@ss,word"
    assert "sslmode" not in kwargs


def test_the_libpq_form_comes_back_for_asyncpg_and_psql() -> None:
    assert libpq_url(normalize_url(FAILOVER)) == (
        "postgresql://atlas:p%40ss%2Cword@10.0.0.1:5432,10.0.0.2:6432/atlas"
        "?sslmode=prefer&target_session_attrs=read-write"
    )


def test_sqlalchemys_repeated_host_form_is_kept_and_missing_ports_are_5432() -> None:
    url = normalize_url("postgresql://u:p@/db?host=a&host=b:7")
    assert database_hosts(url) == [("a", 5432), ("b", 7)]
    assert libpq_url(url) == "postgresql://u:p@a:5432,b:7/db"


def test_one_host_urls_are_unchanged_but_for_the_driver() -> None:
    assert normalize_url("postgres://u:p@h:5/db") == "postgresql+asyncpg://u:p@h:5/db"
    assert libpq_url("postgresql+asyncpg://u:p@h:5/db") == "postgresql://u:p@h:5/db"
    assert database_hosts("postgresql+asyncpg://u@/db?host=/run/pg") == [("/run/pg", 5432)]


def test_preflight_names_every_host_and_never_the_password() -> None:
    line = where(normalize_url(FAILOVER))
    assert line == "10.0.0.1:5432,10.0.0.2:6432/atlas"
    assert "p%40ss" not in line
    assert "atlas:" not in line


@pytest.mark.parametrize("bad", ["not a url", "mysql://u:p@h/db", "mysql://u:p@h1,h2/db"])
def test_bad_urls_are_one_clear_error(bad: str) -> None:
    with pytest.raises(DatabaseUrlError) as err:
        normalize_url(bad)
    assert "p@" not in str(err.value)
