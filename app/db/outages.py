"""Whether an exception means the database cannot be reached right now (an outage, not
a bug): the API answers it 503 + Retry-After, a feed reports it to its readers."""

from __future__ import annotations

# SQLSTATE classes and codes that mean "the server is not there for us right now":
# 08 connection exception; 57P01 admin_shutdown, 57P02 crash_shutdown,
# 57P03 cannot_connect_now (starting up, in recovery); 25006 read_only_sql_transaction
# (the node was demoted to a standby, or is read-only during a failover: the connection
# is dropped and the retry finds the primary) -- all of them also mean the connection
# is no use any more -- and 53300 too_many_connections (refused at connect).
_CONNECTION_GONE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25006"})
_UNAVAILABLE_SQLSTATES = _CONNECTION_GONE_SQLSTATES | {"53300"}
# asyncpg's own classes for "no usable server": none of the hosts of a multi-host URL
# matches target_session_attrs (every one is a standby, or read-only, mid-failover).
_UNAVAILABLE_CLASSES = frozenset(
    {"ConnectionDoesNotExistError", "CannotConnectNowError", "TargetServerAttributeNotMatched"}
)


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (as opposed to a bug or a
    query the database refused): a refused or reset connection, a connection the
    server closed, a connection-class SQLSTATE, or the pool's wait timing out."""
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    if isinstance(exc, PoolTimeoutError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, DBAPIError):
        if exc.connection_invalidated:
            return True
        original = exc.orig
        cause = getattr(original, "__cause__", None) or original
        if isinstance(cause, ConnectionError | TimeoutError):
            return True
        sqlstate = str(getattr(cause, "sqlstate", None) or getattr(original, "pgcode", "") or "")
        return _unavailable(sqlstate) or type(cause).__name__ in _UNAVAILABLE_CLASSES
    # The driver's own error, from a statement sent past SQLAlchemy (atlas_jobs._app.db.driver).
    sqlstate = str(getattr(exc, "sqlstate", None) or "")
    return _unavailable(sqlstate) or type(exc).__name__ in _UNAVAILABLE_CLASSES


def connection_gone(sqlstate: str) -> bool:
    """Whether a server's answer with ``sqlstate`` means its connection is no use any
    more: a connection exception (class 08), the server shutting down or not yet up, or
    a server that no longer takes writes."""
    return sqlstate.startswith("08") or sqlstate in _CONNECTION_GONE_SQLSTATES


def _unavailable(sqlstate: str) -> bool:
    return connection_gone(sqlstate) or sqlstate in _UNAVAILABLE_SQLSTATES
