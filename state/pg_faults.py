"""What PostgreSQL's errors and URLs mean to kanban: which faults another try may not
meet, and URLs fit to connect with and to print."""

from __future__ import annotations

# SQLSTATE classes worth another try: connection exception, transaction rollback
# (serialization failure, deadlock), insufficient resources, lock not available,
# query cancelled (statement timeout), admin/crash shutdown and "starting up".
_TRANSIENT_STATES = ("08", "40", "53", "55P03", "57014", "57P01", "57P02", "57P03")
_PERMANENT_ON_CONNECT = ("28", "3D", "42501")  # credentials, no such database, no access
_PERMANENT_CONNECT_TEXT = ("authentication failed", "does not exist", "pg_hba.conf",
                           "permission denied", "password")
# The server (or a pooler) has no connection to give: a fault of the host, which a worker
# meets for a few seconds before handing its card back (no attempt spent).
OUT_OF_CONNECTIONS = "connections"
_NO_CONNECTION_TEXT = ("too many clients", "too many connections",
                       "no more connections allowed", "remaining connection slots")


def normalise_url(url: str) -> str:
    """postgres://, postgresql:// and SQLAlchemy's postgresql+psycopg:// as a libpq URL."""
    for scheme in ("postgresql+psycopg://", "postgresql+psycopg2://", "postgres://"):
        if url.startswith(scheme):
            return "postgresql://" + url.removeprefix(scheme)
    return url


def hide_password(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return url
    user = creds.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


def is_transient(exc: BaseException, *, connecting: bool = False) -> bool:
    """True for errors that another try may not meet (the server away or busy). While
    connecting, anything but bad credentials or a missing database counts (a server
    starting up, or one not accepting connections for a while)."""
    import psycopg

    state = getattr(exc, "sqlstate", None)
    if connecting and isinstance(exc, psycopg.OperationalError):
        if state:
            return not state.startswith(_PERMANENT_ON_CONNECT)
        text = str(exc)  # libpq reports a refused login as text only
        return not any(words in text for words in _PERMANENT_CONNECT_TEXT)
    if state:
        return state.startswith(_TRANSIENT_STATES) or replanned(exc)
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def replanned(exc: BaseException) -> bool:
    """A prepared statement whose table changed shape under it (a migration of another
    process added a column to what it returns): the store makes psycopg forget what it
    prepared on that connection, so the next try plans afresh."""
    return getattr(exc, "sqlstate", None) == "0A000" and \
        "cached plan must not change result type" in str(exc)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def out_of_connections(exc: BaseException) -> bool:
    """The server or pooler refused a connection for want of one ("too many clients")."""
    if getattr(exc, "sqlstate", None) == "53300":
        return True
    text = str(exc)
    return any(words in text for words in _NO_CONNECTION_TEXT)
