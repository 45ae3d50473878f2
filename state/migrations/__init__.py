"""Append-only, ordered schema migrations recorded in the `schema_migration` table.

Add a migration by appending to MIGRATIONS; never edit or reorder an existing one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kanban.state.errors import DatabaseError, SchemaTooNewError
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow

# Any number to serialise migrations across processes on PostgreSQL ("kanban" in ASCII).
_PG_MIGRATION_LOCK = 0x6B616E62616E


@dataclass(frozen=True)
class Migration:
    id: int
    name: str
    apply: Callable[[Conn], None]


def sql_file(stem: str) -> Callable[[Conn], None]:
    """A migration read from `<stem>.<dialect>.sql` beside this module."""

    def apply(conn: Conn) -> None:
        from importlib import resources  # only when migrating: it costs every start ~5 ms

        name = f"{stem}.{conn.dialect}.sql"
        text = resources.files(__package__).joinpath(name).read_text()
        for body in statements(text):
            conn.raw.execute(body)  # DDL as written: no parameters to adapt

    return apply


def statements(text: str) -> list[str]:
    """A migration file's statements: split at a line ending in `;`, but not inside a
    dollar-quoted ($$) function body; comment lines dropped."""
    out: list[str] = []
    lines: list[str] = []
    quoted = False
    for line in text.splitlines():
        if not quoted and line.lstrip().startswith("--"):
            continue
        lines.append(line)
        quoted ^= line.count("$$") % 2 == 1
        if not quoted and line.rstrip().endswith(";"):
            out.append("\n".join(lines).strip().removesuffix(";").strip())
            lines = []
    tail = "\n".join(lines).strip()
    if tail:
        out.append(tail)
    return [body for body in out if body]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial", sql_file("0001_initial")),
    Migration(2, "board_indexes", sql_file("0002_board_indexes")),
    Migration(3, "cron", sql_file("0003_cron")),
    Migration(4, "agent_runtime", sql_file("0004_agent_runtime")),
    Migration(5, "daily", sql_file("0005_daily")),
    Migration(6, "workspaces_approvals", sql_file("0006_workspaces_approvals")),
    Migration(7, "instances_and_wakeups", sql_file("0007_instances_and_wakeups")),
    Migration(8, "waiting", sql_file("0008_waiting")),
    Migration(9, "hot_paths", sql_file("0009_hot_paths")),
    Migration(10, "review", sql_file("0010_review")),
    Migration(11, "dependency_failure", sql_file("0011_dependency_failure")),
    Migration(12, "list_index", sql_file("0012_list_index")),
    Migration(13, "ready_due", sql_file("0013_ready_due")),
    Migration(14, "quiet_tick", sql_file("0014_quiet_tick")),
    Migration(15, "wakeups", sql_file("0015_wakeups")),
    Migration(16, "skills", sql_file("0016_skills")),
    Migration(17, "notifications", sql_file("0017_notifications")),
    Migration(18, "metrics", sql_file("0018_metrics")),
    Migration(19, "traces", sql_file("0019_traces")),
    Migration(20, "sharded_counts", sql_file("0020_sharded_counts")),
    Migration(21, "scheduled_wakeups", sql_file("0021_scheduled_wakeups")),
    Migration(22, "ordered_counts", sql_file("0022_ordered_counts")),
    Migration(23, "card_search", sql_file("0023_card_search")),
)
LATEST = MIGRATIONS[-1].id

_CREATE_TRACKING = (
    "CREATE TABLE IF NOT EXISTS schema_migration ("
    " id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(128) NOT NULL,"
    " applied_at {ts} NOT NULL)"
)


def current_version(conn: Conn) -> int | None:
    """The newest applied migration, 0 for an empty database, None if not kanban's."""
    if conn.dialect == "sqlite":
        tables = set(conn.column("SELECT name FROM sqlite_master WHERE type = 'table'"))
    else:
        tables = set(conn.column("SELECT table_name FROM information_schema.tables "
                                 "WHERE table_schema = current_schema()"))
    if "schema_migration" not in tables:
        return 0 if not tables else None
    return int(conn.scalar("SELECT coalesce(max(id), 0) FROM schema_migration"))


def check_version(version: int | None, where: str) -> None:
    if version is None:
        raise DatabaseError(f"{where} is not a kanban database (it holds other tables)")
    if version > LATEST:
        raise SchemaTooNewError(
            f"{where} was written by a newer kanban (schema {version}, this version knows "
            f"{LATEST}); upgrade kanban to use it"
        )


def migrate(db: Database) -> int:
    """Bring the database to the latest schema; returns how many migrations ran.

    Concurrent callers serialise on the write lock (SQLite's BEGIN IMMEDIATE, an
    advisory lock on PostgreSQL) and re-read the version under it.
    """
    with db.read() as conn:
        version = current_version(conn)
    check_version(version, db.display)
    if version == LATEST:
        return 0
    with db.write() as conn:
        if conn.dialect == "postgresql":
            conn.execute("SET LOCAL statement_timeout = 0")  # waiting for another migrator
            conn.execute("SELECT pg_advisory_xact_lock(:key)", {"key": _PG_MIGRATION_LOCK})
        version = current_version(conn)
        check_version(version, db.display)
        ts = "TIMESTAMP WITH TIME ZONE" if conn.dialect == "postgresql" else "DATETIME"
        conn.execute(_CREATE_TRACKING.format(ts=ts))
        pending = [m for m in MIGRATIONS if m.id > (version or 0)]
        for migration in pending:
            migration.apply(conn)
            conn.execute("INSERT INTO schema_migration (id, name, applied_at) "
                         "VALUES (:id, :name, :at)",
                         {"id": migration.id, "name": migration.name, "at": utcnow()})
        return len(pending)
