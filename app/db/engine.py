"""Which database to use, and the async engine for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from sqlalchemy import event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry
from sqlalchemy.util import await_only

from atlas_jobs._app.settings import Settings


class DatabaseUrlError(ValueError):
    """``DATABASE_URL`` cannot be used; the message never repeats the URL (a password)."""


def normalize_url(url: str) -> str:
    """Accept the usual ``postgres://``/``postgresql://`` spellings; use asyncpg.

    Several hosts are accepted in libpq's form -- ``postgresql://u:p@h1:5432,h2:5432/db
    ?target_session_attrs=read-write``, what ``pg_autoctl show uri`` prints -- and in
    SQLAlchemy's (``?host=h1:5432&host=h2:5432``); the result is SQLAlchemy's, every
    host with its port. libpq's ``sslmode`` becomes asyncpg's ``ssl`` (same values)."""
    try:
        parsed = make_url(_hosts_into_query(url))
    except (ArgumentError, ValueError) as exc:
        raise DatabaseUrlError(
            "DATABASE_URL is not a URL (expected postgresql://user:password@host:5432/database)"
        ) from exc
    if parsed.drivername in {"postgres", "postgresql", "postgresql+psycopg", "postgresql+psycopg2"}:
        parsed = parsed.set(drivername="postgresql+asyncpg")
    if parsed.drivername != "postgresql+asyncpg":
        raise DatabaseUrlError(
            f"DATABASE_URL: unsupported database driver {parsed.drivername!r}; use PostgreSQL"
        )
    hosts = database_hosts(parsed)
    if len(hosts) > 1:
        parsed = parsed.update_query_dict({"host": [f"{h}:{p}" for h, p in hosts]})
    if "sslmode" in parsed.query:
        parsed = parsed.update_query_dict({"ssl": parsed.query["sslmode"]}).difference_update_query(
            ["sslmode"]
        )
    return parsed.render_as_string(hide_password=False)


def _hosts_into_query(url: str) -> str:
    """libpq's ``user@h1:p1,h2:p2/db`` as SQLAlchemy's ``user@/db?host=h1:p1&host=h2:p2``
    (SQLAlchemy's URL parser takes one host); any other URL unchanged."""
    parts = urlsplit(url)
    userinfo, at, hostspec = parts.netloc.rpartition("@")
    if "," not in hostspec:
        return url
    hosts = [f"host={quote(entry, safe=':[]')}" for entry in hostspec.split(",") if entry]
    query = "&".join([*hosts, parts.query] if parts.query else hosts)
    return f"{parts.scheme}://{userinfo}{at}{parts.path}?{query}"


def database_hosts(url: str | URL) -> list[tuple[str, int]]:
    """Every ``(host, port)`` of a URL, in the order connections try them (5432 when a
    port is not given)."""
    parsed = make_url(url) if isinstance(url, str) else url
    listed = parsed.query.get("host")
    entries = [listed] if isinstance(listed, str) else list(listed or ())
    tokens = [token for entry in entries for token in entry.split(",") if token]
    if len(tokens) <= 1 and not (tokens and ":" in tokens[0]):  # one host (or a socket dir)
        return [(parsed.host or (tokens[0] if tokens else "localhost"), parsed.port or 5432)]
    return [_host_and_port(token) for token in tokens]


def _host_and_port(token: str) -> tuple[str, int]:
    host, colon, port = token.rpartition(":")
    if colon and port.isdigit():
        return host, int(port)
    return token, 5432  # no port, or a bare [IPv6] address


def describe_url(url: str) -> str:
    """``host:port[,host:port...]/database`` -- never the user or the password."""
    parsed = make_url(url)
    hosts = ",".join(f"{host}:{port}" for host, port in database_hosts(parsed))
    return f"{hosts}/{parsed.database or ''}"


def resolve_database_url(settings: Settings, *, start_embedded: bool = True) -> str:
    """``DATABASE_URL`` when set, otherwise the embedded server (started if needed)."""
    if settings.database_url:
        return normalize_url(settings.database_url)
    if not start_embedded:
        raise RuntimeError("DATABASE_URL is unset and the embedded server may not be started")
    from atlas_jobs._app.db import embedded

    return embedded.ensure_running(settings.data_dir).url()


def libpq_url(url: str) -> str:
    """The same URL for libpq tools and raw asyncpg (no SQLAlchemy driver suffix): several
    hosts in libpq's ``h1:p1,h2:p2`` form, ``ssl`` back to ``sslmode``."""
    parsed = make_url(url).set(drivername="postgresql")
    if "ssl" in parsed.query:
        parsed = parsed.update_query_dict({"sslmode": parsed.query["ssl"]}).difference_update_query(
            ["ssl"]
        )
    hosts = database_hosts(parsed)
    if len(hosts) == 1:
        return parsed.render_as_string(hide_password=False)
    single = parsed.difference_update_query(["host"]).set(host="placeholder", port=None)
    text = single.render_as_string(hide_password=False)
    hostspec = ",".join(f"{host}:{port}" for host, port in hosts)
    return text.replace("@placeholder/", f"@{hostspec}/", 1).replace(
        "://placeholder/", f"://{hostspec}/", 1
    )


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    max_overflow: int | None = None,
    application_name: str = "atlas",
    server_settings: dict[str, str] | None = None,
    pre_ping: bool = True,
) -> AsyncEngine:
    """An asyncpg engine. ``pre_ping`` checks every pooled connection on checkout -- one
    round trip each time (:func:`_ping_on_checkout`) -- so that a request never meets a
    connection the server has dropped (the API wants this). Workers go without: each of
    their loops survives a failed statement (the claim loop backs off, the heartbeat
    beats again, a job's write error becomes a retry or the reaper's rescue), and the
    first disconnect error invalidates the whole pool, so every later checkout gets a
    fresh connection."""
    engine = create_async_engine(
        url,
        poolclass=CountingPool,
        pool_size=pool_size,
        max_overflow=pool_size if max_overflow is None else max_overflow,
        # SQL parameters hold job input, Idempotency-Keys and key hashes: an error's
        # message (and any traceback that quotes it) must never carry them.
        hide_parameters=True,
        connect_args={
            "server_settings": {"application_name": application_name, **(server_settings or {})}
        },
    )
    if pre_ping:
        event.listen(engine.sync_engine, "checkout", _ping_on_checkout)
    event.listen(engine.sync_engine, "handle_error", _read_only_is_a_disconnect)
    return engine


# read_only_sql_transaction: the server we are connected to no longer takes writes --
# demoted to a standby, or held read-only by pg_auto_failover while it promotes another.
READ_ONLY_SQLSTATE = "25006"


def _read_only_is_a_disconnect(context: ExceptionContext) -> None:
    """A connection on a server that refuses writes is as good as a closed one: mark it
    a disconnect, so SQLAlchemy discards it -- and every other connection of the pool,
    all opened to that server -- and the next checkout connects again, which with
    ``target_session_attrs=read-write`` finds the new primary. Without this, a pool
    that reached a demoted primary keeps failing every write on the same connections."""
    original = context.original_exception
    cause = getattr(original, "__cause__", None) or original
    sqlstate = getattr(cause, "sqlstate", None) or getattr(original, "pgcode", None)
    if sqlstate == READ_ONLY_SQLSTATE:
        context.is_disconnect = True


def _ping_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """``pool_pre_ping`` in ONE round trip. SQLAlchemy's asyncpg ping wraps its ``;`` in
    ``BEGIN``/``ROLLBACK`` (for pgbouncer's transaction mode, which we do not support:
    we rely on session state and LISTEN), three round trips on every checkout. A dead
    connection raises :class:`~sqlalchemy.exc.DisconnectionError`: the pool discards it
    and checks out another (SQLAlchemy's documented pessimistic-disconnect recipe)."""
    try:
        await_only(dbapi_connection.driver_connection.fetchrow(";"))
    except Exception as exc:
        raise DisconnectionError("pooled connection failed its ping") from exc


def single_statements(engine: AsyncEngine) -> AsyncEngine:
    """The same pool without ``BEGIN``/``COMMIT`` round trips, for work that is ONE
    statement -- atomic on its own, so a transaction around it only adds two round trips
    (the claim, a batched publication, a heartbeat). Never for several statements that
    must commit together."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


class Connects(Protocol):
    """What hands out connections: an engine, or :class:`AutocommitConnections`."""

    def connect(self) -> AbstractAsyncContextManager[AsyncConnection]: ...


class AutocommitConnections:
    """What :func:`single_statements` gives, per connection: each checkout of
    ``engine``'s pool is switched to autocommit (and back when it returns). Cheaper in
    CPU per checkout than the option engine of :func:`single_statements` -- whose
    ``isolation_level`` option is applied by an ``engine_connect`` listener, which makes
    every connection event (begin, execute, commit) go through SQLAlchemy's joined
    dispatch -- for the API's hottest paths, where that is a few percent of a request."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            # Set on the sync connection: a fresh checkout has no transaction, so this
            # only flags the driver's connection (no I/O; were there any, SQLAlchemy
            # would raise MissingGreenlet). ``await conn.execution_options(...)`` would
            # run the same call through a greenlet of its own -- each greenlet costs a
            # frame stack (an mmap and munmap) and its switches, per request.
            sync = conn.sync_connection
            if sync is None:  # pragma: no cover - the context manager started it
                raise RuntimeError("the connection was not started")
            sync.execution_options(isolation_level="AUTOCOMMIT")
            yield conn

    def begin(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Like ``engine.begin()``: in autocommit each statement commits as it runs, so
        this is :meth:`connect` -- no ``BEGIN`` or ``COMMIT`` is sent, and no greenlet
        runs SQLAlchemy's no-op begin and commit either."""
        return self.connect()


@asynccontextmanager
async def one_snapshot(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A short-lived connection whose statements all read one snapshot (a ``REPEATABLE
    READ`` transaction, rolled back at the end): for a read of several statements --
    the job, its stages, its history -- that must show one version of the job. Under
    read committed a change committed between two of them pairs a job row with the
    history or stages of the next version."""
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="REPEATABLE READ")


WORKER_SESSION_SETTINGS: dict[str, str] = {
    # The claim walks its lanes (claim_lanes) and, per lane, ix_jobs_lanes in priority,
    # available_at, seq order, stopping after LIMIT rows. With stale statistics (a bulk
    # enqueue before autovacuum's next ANALYZE) the planner prefers a bitmap scan that
    # visits EVERY entry of the index -- including the dead ones of jobs claimed since
    # the last vacuum -- and sorts them. Bitmap scans also never mark dead index entries
    # as killed, so the cost keeps growing. Every query a worker runs is a primary-key
    # lookup or an ordered walk of a partial index, so worker sessions simply do without
    # bitmap scans.
    "enable_bitmapscan": "off",
    # Prepared statements run on their generic plan, never re-planned. With its LIMIT a
    # parameter, the claim's generic plan is costed for a fraction of the queued rows, so
    # once the queue is large PostgreSQL keeps planning every execution afresh, and that
    # planning is what made a claim cost more server CPU at a large queue than at a
    # small one (docs/performance.md, "Figures behind the code"). The generic plans of the
    # worker's statements are the same walks of their partial indexes or primary-key
    # lookups as the custom ones (tests/workers/test_generic_plans.py), bitmap scans being
    # off.
    "plan_cache_mode": "force_generic_plan",
}


class CountingPool(AsyncAdaptedQueuePool):
    """SQLAlchemy's asyncio queue pool, also counting the checkouts under way: the tasks
    waiting for a connection (SQLAlchemy counts the connections checked out, not the
    waiters). ``_do_get`` is the hook a pool class implements to hand out a connection."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checkouts_under_way = 0

    def _do_get(self) -> ConnectionPoolEntry:
        self.checkouts_under_way += 1
        try:
            return super()._do_get()
        finally:
            self.checkouts_under_way -= 1


def pool_usage(engine: AsyncEngine) -> tuple[int, int]:
    """(connections checked out, tasks waiting for one) of the engine's pool (a
    :class:`CountingPool`; another pool reports no waiters)."""
    pool: Any = engine.pool
    checked_out = int(pool.checkedout()) if hasattr(pool, "checkedout") else 0
    return checked_out, int(getattr(pool, "checkouts_under_way", 0))
