"""Migrating from empty yields exactly the schema the models declare, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect
from sqlmodel import SQLModel

import kanban.state.models  # noqa: F401 - registers the tables on SQLModel.metadata
from kanban.state.db import open_database
from kanban.state.migrations import LATEST, MIGRATIONS
from kanban.state.paths import DbLocation


def sqlite_affinity(declared: str) -> str:
    """SQLite's type affinity of a declared column type (section 3.1 of its datatype docs)."""
    name = declared.upper()
    if "INT" in name:
        return "INTEGER"
    if any(word in name for word in ("CHAR", "CLOB", "TEXT")):
        return "TEXT"
    if not name or "BLOB" in name:
        return "BLOB"
    if any(word in name for word in ("REAL", "FLOA", "DOUB")):
        return "REAL"
    return "NUMERIC"


def _clause(value: Any) -> str:
    text = str(getattr(value, "text", value))
    return re.sub(r"\s+", " ", text).strip().lower()


def schema_of(engine: Engine) -> dict[str, Any]:
    """Tables, columns, keys, uniques and indexes (with partial-index WHEREs), comparably."""
    insp = inspect(engine)
    sqlite = engine.dialect.name == "sqlite"
    schema: dict[str, Any] = {}
    for table in sorted(insp.get_table_names()):
        columns = [
            (c["name"], bool(c["nullable"]),
             sqlite_affinity(str(c["type"])) if sqlite else c["type"].compile(engine.dialect))
            for c in insp.get_columns(table)
        ]
        indexes = sorted(
            (i["name"], tuple(i["column_names"]), bool(i["unique"]),
             tuple(sorted((k, _clause(v)) for k, v in i.get("dialect_options", {}).items())),
             tuple(sorted((k, tuple(v)) for k, v in i.get("column_sorting", {}).items())))
            for i in insp.get_indexes(table)
        )
        schema[table] = {
            "columns": columns,
            "primary_key": insp.get_pk_constraint(table)["constrained_columns"],
            "foreign_keys": sorted(
                (tuple(f["constrained_columns"]), f["referred_table"],
                 tuple(f["referred_columns"])) for f in insp.get_foreign_keys(table)),
            "unique": sorted(tuple(u["column_names"])
                             for u in insp.get_unique_constraints(table)),
            "indexes": indexes,
        }
    return schema


def sqlite_index_sql(engine: Engine) -> dict[str, str]:
    """Index definitions as SQLite stores them (reflection drops DESC)."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
        return {name: _clause(sql).replace('"', "") for name, sql in rows}


def sqlite_search_sql(engine: Engine) -> dict[str, str]:
    """Full-text tables and their triggers as SQLite stores them."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' OR "
            "(type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%')")
        return {name: _clause(sql) for name, sql in rows}


def postgres_trigger_sql(engine: Engine) -> dict[str, str]:
    """Triggers and the functions they run as PostgreSQL prints them back."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal "
            "UNION ALL SELECT proname, pg_get_functiondef(p.oid) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'")
        return {name: _clause(sql) for name, sql in rows}


def sa_engine(target: str) -> Engine:
    """An SQLAlchemy engine over a store's database, for reflection only."""
    if target.startswith("postgresql://"):
        return create_engine("postgresql+psycopg://" + target.removeprefix("postgresql://"))
    return create_engine(f"sqlite:///{target}")


def test_migrations_are_numbered_in_order() -> None:
    assert [m.id for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert MIGRATIONS[-1].id == LATEST
    assert len({m.name for m in MIGRATIONS}) == len(MIGRATIONS)


def test_sqlite_migrated_from_empty_equals_the_models(tmp_path: Path) -> None:
    migrated = open_database(DbLocation(str(tmp_path / "migrated.db"), "flag"), create=True)
    declared = create_engine(f"sqlite:///{tmp_path / 'declared.db'}")
    SQLModel.metadata.create_all(declared)
    reflected = sa_engine(migrated.target)
    try:
        got, want = schema_of(reflected), schema_of(declared)
        assert got.keys() == want.keys()
        for table in want:
            assert got[table] == want[table], table
        assert sqlite_index_sql(reflected) == sqlite_index_sql(declared)
        search = sqlite_search_sql(reflected)
        assert search == sqlite_search_sql(declared)
        assert {"card_fts", "comment_fts", "message_fts", "card_fts_update",
                "message_fts_insert", "comment_fts_delete"} <= search.keys()
        # The comparison is not vacuous: the ready queue is a partial index.
        ready_queue = {i[0]: i for i in got["card"]["indexes"]}["ix_card_ready_queue"]
        assert ready_queue[3] == (("sqlite_where", "status = 'ready'"),)
        assert "priority desc, id" in sqlite_index_sql(reflected)["ix_card_ready_queue"]
    finally:
        migrated.dispose()
        declared.dispose()
        reflected.dispose()


@pytest.mark.postgres
def test_postgres_migrated_from_empty_equals_the_models(pg_url: str, tmp_path: Path) -> None:
    migrated = open_database(DbLocation(pg_url, "flag"))
    migrated.dispose()
    declared = sa_engine(pg_url)
    try:
        got = schema_of(declared)
        got_triggers = postgres_trigger_sql(declared)
        with declared.begin() as conn:  # rebuild the same database from the models
            conn.exec_driver_sql("DROP SCHEMA public CASCADE")
            conn.exec_driver_sql("CREATE SCHEMA public")
        SQLModel.metadata.create_all(declared)
        want = schema_of(declared)
        assert got_triggers == postgres_trigger_sql(declared)
        assert "card_count_delete" in got_triggers  # migration 22's, whose drops are followed
        declared.dispose()
        assert got.keys() == want.keys()
        for table in want:
            assert got[table] == want[table], table
        ready_queue = {i[0]: i for i in got["card"]["indexes"]}["ix_card_ready_queue"]
        assert "status" in dict(ready_queue[3])["postgresql_where"]
        assert dict(ready_queue[4]) == {"priority": ("desc",)}
    finally:
        declared.dispose()


@pytest.mark.postgres
def test_postgres_migration_is_idempotent_and_refuses_newer(pg_url: str) -> None:
    from kanban.state.errors import SchemaTooNewError
    from kanban.state.migrations import migrate

    db = open_database(DbLocation(pg_url, "flag"))
    try:
        assert migrate(db) == 0
        with db.write() as conn:
            conn.execute("INSERT INTO schema_migration (id, name, applied_at) "
                         "VALUES (:id, 'future', now())", {"id": LATEST + 1})
    finally:
        db.dispose()
    with pytest.raises(SchemaTooNewError, match="newer kanban"):
        open_database(DbLocation(pg_url, "flag"))


def test_a_version_one_database_upgrades_in_place_and_keeps_its_cards(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "v1.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE schema_migration (id INTEGER NOT NULL PRIMARY KEY, "
                "name VARCHAR(128) NOT NULL, applied_at DATETIME NOT NULL)")
    sql = (Path(kanban.state.models.__file__).parent / "migrations" / "0001_initial.sqlite.sql")
    old.executescript(sql.read_text())
    old.execute("INSERT INTO schema_migration VALUES (1, 'initial', '2026-01-01 00:00:00')")
    old.execute("INSERT INTO board VALUES ('default', 0, '2026-01-01 00:00:00.000000')")
    old.execute(
        "INSERT INTO card (board, title, goal, context, status, priority, profile, depth, "
        "created_by, attempt, max_attempts, retry_base, run_after, input_tokens, "
        "output_tokens, cached_tokens, created_at, updated_at) VALUES ('default', 'kept', '', "
        "'', 'ready', 0, 'default', 0, 'user', 0, 3, 0, '2026-01-01 00:00:00.000000', 0, 0, 0, "
        "'2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000')")
    old.close()
    db = open_database(DbLocation(str(path), "flag"))
    try:
        with db.read() as conn:
            applied = conn.all("SELECT id FROM schema_migration ORDER BY id")
            titles = conn.all("SELECT title FROM card")
        assert [row[0] for row in applied] == [m.id for m in MIGRATIONS]
        assert titles == [("kept",)]
        reflected = sa_engine(db.target)
        assert "ix_card_board_column" in sqlite_index_sql(reflected)
        reflected.dispose()
    finally:
        db.dispose()
