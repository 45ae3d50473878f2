"""Append-only, ordered schema migrations recorded in the `schema_migration` table.

Add a migration by appending to MIGRATIONS; never edit or reorder an existing one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from sqlalchemy import Connection, inspect

from state.engine import Database
from state.errors import DatabaseError, SchemaTooNewError
from state.timeutil import utcnow


@dataclass(frozen=True)
class Migration:
    id: int
    name: str
    apply: Callable[[Connection], None]


def _sql_file(stem: str) -> Callable[[Connection], None]:
    def apply(conn: Connection) -> None:
        name = f"{stem}.{conn.dialect.name}.sql"
        text = resources.files(__package__).joinpath(name).read_text()
        for statement in text.split(";\n"):
            body = "\n".join(
                line for line in statement.splitlines() if not line.startswith("--")
            ).strip()
            if body:
                conn.exec_driver_sql(body)

    return apply


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial", _sql_file("0001_initial")),
    Migration(2, "board_indexes", _sql_file("0002_board_indexes")),
)
LATEST = MIGRATIONS[-1].id

_CREATE_TRACKING = (
    "CREATE TABLE IF NOT EXISTS schema_migration ("
    " id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(128) NOT NULL,"
    " applied_at {ts} NOT NULL)"
)


def current_version(conn: Connection) -> int | None:
    """The newest applied migration, 0 for an empty database, None if not kanban's."""
    if conn.dialect.name == "sqlite":  # cheaper than an Inspector at every start
        tables = {row[0] for row in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    else:
        tables = set(inspect(conn).get_table_names())
    if "schema_migration" not in tables:
        return 0 if not tables else None
    return int(conn.exec_driver_sql("SELECT coalesce(max(id), 0) FROM schema_migration").scalar())


def check_version(version: int | None, where: str) -> None:
    if version is None:
        raise DatabaseError(f"{where} is not a kanban database (it holds other tables)")
    if version > LATEST:
        raise SchemaTooNewError(
            f"{where} was written by a newer kanban (schema {version}, this version knows "
            f"{LATEST}); upgrade kanban to use it"
        )


def migrate(db: Database) -> int:
    """Bring the database to the latest schema; returns how many migrations ran."""
    where = str(db.path or db.engine.url.render_as_string(hide_password=True))
    with db.read() as conn:
        version = current_version(conn)
    check_version(version, where)
    if version == LATEST:
        return 0
    with db.write() as conn:
        # Re-read under the write lock: another process may have migrated meanwhile.
        version = current_version(conn)
        check_version(version, where)
        ts = "TIMESTAMP WITH TIME ZONE" if conn.dialect.name == "postgresql" else "DATETIME"
        conn.exec_driver_sql(_CREATE_TRACKING.format(ts=ts))
        pending = [m for m in MIGRATIONS if m.id > (version or 0)]
        for migration in pending:
            migration.apply(conn)
            conn.exec_driver_sql(
                "INSERT INTO schema_migration (id, name, applied_at) VALUES (?, ?, ?)"
                if conn.dialect.name == "sqlite"
                else "INSERT INTO schema_migration (id, name, applied_at) VALUES (%s, %s, %s)",
                (migration.id, migration.name, _stamp(conn)),
            )
        return len(pending)


def _stamp(conn: Connection) -> object:
    now = utcnow()
    return now.replace(tzinfo=None).isoformat(sep=" ") if conn.dialect.name == "sqlite" else now
