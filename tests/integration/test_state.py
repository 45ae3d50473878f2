"""Opening databases (refusals, creation, pragmas, BEGIN IMMEDIATE), paths, config."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
import threading
import time
from pathlib import Path

import pytest

import kanban.state.sqlite as sqlite_store
from kanban.state.config import BUILTIN_PROFILES, Limits, Profile
from kanban.state.config_file import load_config
from kanban.state.db import open_database
from kanban.state.errors import (
    ConfigError,
    DatabaseError,
    SchemaTooNewError,
    TransientDatabaseError,
)
from kanban.state.migrations import LATEST
from kanban.state.paths import DbLocation, resolve_db
from kanban.state.postgres import hide_password, normalise_url
from kanban.state.sqlite import BUSY_SLICE_S, SQLiteDatabase
from tests.support.db import open_sqlite


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def flag(path: Path) -> DbLocation:
    return DbLocation(str(path), "flag")


# Refusals


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    db = open_sqlite(path)
    with db.write() as conn:
        conn.execute("INSERT INTO schema_migration (id, name, applied_at) "
                     "VALUES (?, 'from the future', '2030-01-01 00:00:00')", (LATEST + 1,))
    db.dispose()
    before = digest(path)
    with pytest.raises(SchemaTooNewError, match=rf"newer kanban \(schema {LATEST + 1}, this "
                                                rf"version knows {LATEST}\)") as caught:
        open_database(flag(path))
    assert str(caught.value).startswith(str(path))
    assert digest(path) == before


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.close()
    with pytest.raises(DatabaseError, match=f"{path} is not a kanban database"):
        open_database(flag(path))
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    conn.close()
    assert tables == ["invoices"]


def test_a_refused_foreign_database_is_left_byte_for_byte_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.close()
    before = digest(path)
    with pytest.raises(DatabaseError):
        open_database(flag(path))
    assert digest(path) == before


@pytest.mark.parametrize("content", [b"not a database at all\n" * 200, b"\x00\xff" * 4096])
def test_a_garbage_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "kanban.db"
    path.write_bytes(content)
    with pytest.raises(DatabaseError, match="corrupt or not a kanban database"):
        open_database(flag(path))
    assert path.read_bytes() == content


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="is a directory"):
        open_database(flag(tmp_path))


# Creation


@pytest.mark.parametrize("source", ["flag", "env", "project"])
def test_a_missing_explicit_database_is_refused_and_nothing_created(
    tmp_path: Path, source: str
) -> None:
    path = tmp_path / "nested" / "kanban.db"
    with pytest.raises(DatabaseError, match="no kanban database at .*`kanban .*init`"):
        open_database(DbLocation(str(path), source))
    assert not path.parent.exists()


def test_create_makes_the_file_private_with_its_folder(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "deeper" / "kanban.db"
    db = open_database(flag(path), create=True)
    db.dispose()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert open_database(flag(path)).dispose() is None  # now it opens without create


def test_the_user_wide_default_is_never_created_silently(tmp_path: Path) -> None:
    location = resolve_db(env={"XDG_DATA_HOME": str(tmp_path / "data")}, cwd=tmp_path)
    assert location.implicit
    with pytest.raises(DatabaseError, match="no kanban database found .* run `kanban init`"):
        open_database(location)
    assert not location.path.parent.exists()
    open_database(location, create=True).dispose()
    assert stat.S_IMODE(location.path.stat().st_mode) == 0o600


# Connections: pragmas and BEGIN IMMEDIATE


@pytest.mark.parametrize(("synchronous", "level"), [("NORMAL", 1), ("FULL", 2), ("full", 2)])
def test_pragmas_hold_on_every_connection(tmp_path: Path, synchronous: str, level: int) -> None:
    db = open_sqlite(tmp_path / "kanban.db", synchronous=synchronous)
    try:
        # Several connections at once, each set up by the store's connect().
        assert isinstance(db, SQLiteDatabase)
        conns = [db.connect() for _ in range(3)]
        for conn in conns:
            pragmas = {name: conn.cursor().execute(f"PRAGMA {name}").fetchone()[0]
                       for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")}
            assert pragmas == {"journal_mode": "wal", "synchronous": level, "foreign_keys": 1,
                               "busy_timeout": int(BUSY_SLICE_S * 1000)}
        for conn in conns:
            conn.close()
        with db.read() as conn:
            assert conn.scalar("PRAGMA foreign_keys") == 1
    finally:
        db.dispose()


def test_synchronous_must_be_normal_or_full(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="synchronous must be NORMAL or FULL"):
        SQLiteDatabase(tmp_path / "kanban.db", synchronous="OFF")


def test_foreign_keys_are_enforced(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        with pytest.raises(sqlite3.IntegrityError), db.write() as conn:
            conn.execute("INSERT INTO comment (card_id, author, body, at) "
                                 "VALUES (999, 'user', 'orphan', '2025-01-01 00:00:00')")
    finally:
        db.dispose()


def test_write_takes_the_write_lock_at_begin_and_read_does_not(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    db = open_sqlite(path)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        with db.read():
            other.execute("BEGIN IMMEDIATE")  # a reader leaves the write lock free
            other.execute("ROLLBACK")
        # No statement yet: BEGIN IMMEDIATE alone holds the lock.
        with db.write(), pytest.raises(sqlite3.OperationalError, match="database is locked"):
            other.execute("BEGIN IMMEDIATE")
    finally:
        other.close()
        db.dispose()


@pytest.mark.parametrize("landing", ["after BEGIN ran", "before the body ran"])
def test_an_interrupt_between_begin_and_the_body_leaves_the_lock_free(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landing: str) -> None:
    """A Ctrl-C lands where Python checks for signals: right after BEGIN IMMEDIATE returns,
    or on the way into the `with` body. The transaction is undone there, or the thread's
    connection keeps the write lock and every other writer fails busy (`kanban run`'s own
    dispatcher could not hand its card back once in CI)."""
    path = tmp_path / "kanban.db"
    db = open_sqlite(path)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    armed = [True]

    def interrupt() -> None:
        if armed:
            armed.clear()
            raise KeyboardInterrupt

    if landing == "after BEGIN ran":
        execute = sqlite_store.RingingConnection.execute

        def interrupted(self: sqlite3.Connection, sql: str, *args: object) -> sqlite3.Cursor:
            cursor = execute(self, sql, *args)  # type: ignore[arg-type]
            if sql == "BEGIN IMMEDIATE":
                interrupt()
            return cursor

        monkeypatch.setattr(sqlite_store.RingingConnection, "execute", interrupted)
    else:
        conn_class = sqlite_store.Conn

        def interrupted_conn(*args: object) -> object:
            interrupt()
            return conn_class(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(sqlite_store, "Conn", interrupted_conn)
    try:
        with pytest.raises(KeyboardInterrupt), db.write():
            pytest.fail("the body ran")
        assert not armed
        other.execute("BEGIN IMMEDIATE")  # free at once: not 'database is locked'
        other.execute("ROLLBACK")
        db.write_one("INSERT INTO setting (key, value) VALUES ('after', 'v')")
        with db.write() as conn:  # the thread's own connection is usable too
            conn.run("INSERT INTO setting (key, value) VALUES ('again', 'v')")
        with db.read() as conn:
            assert conn.column("SELECT key FROM setting WHERE value = 'v' ORDER BY key") == [
                "after", "again"]
    finally:
        other.close()
        db.dispose()


def test_one_statement_writes_in_autocommit_and_waits_out_a_busy_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "kanban.db"
    db = open_sqlite(path)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    insert = "INSERT INTO setting (key, value) VALUES (:k, 'v')"
    retrying = threading.Event()
    pause = time.sleep

    def noted_pause(seconds: float) -> None:  # write_one's pause between busy slices
        retrying.set()
        pause(seconds)

    monkeypatch.setattr(sqlite_store.time, "sleep", noted_pause)
    try:
        other.execute("BEGIN IMMEDIATE")  # held past the writer's patience: refused
        db.patience_s = BUSY_SLICE_S
        with pytest.raises(TransientDatabaseError, match="held its write lock too long"):
            db.write_one(insert, {"k": "refused"})
        db.patience_s = 60.0
        done: list[int] = []
        writer = threading.Thread(target=lambda: done.append(db.write_one(insert, {"k": "kept"})))
        writer.start()
        assert retrying.wait(timeout=60)  # busy once at least...
        other.execute("ROLLBACK")  # ...then the lock comes free
        writer.join(timeout=60)
        assert done == [1]
        with db.read() as conn:
            assert conn.column("SELECT key FROM setting WHERE value = 'v'") == ["kept"]
        assert not db._held().in_transaction  # committed by the statement itself
    finally:
        other.close()
        db.dispose()


def test_one_statement_on_a_file_that_is_no_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "kanban.db"
    db = open_sqlite(path)
    db.dispose()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"not a database at all, " * 200)
    try:
        with pytest.raises(DatabaseError):  # kanban's, with the file named, not sqlite3's
            db.write_one("INSERT INTO setting (key, value) VALUES ('k', 'v')")
    finally:
        db.dispose()


# Where the database is


def test_resolve_order(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".kanban").mkdir(parents=True)
    (project / ".kanban" / "kanban.db").touch()
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    env = {"KANBAN_DB": str(tmp_path / "env.db"), "XDG_DATA_HOME": str(tmp_path / "data")}

    flag_wins = resolve_db(str(tmp_path / "flag.db"), env=env, cwd=deep)
    assert (flag_wins.source, flag_wins.target) == ("flag", str(tmp_path / "flag.db"))
    env_wins = resolve_db(None, env=env, cwd=deep)
    assert (env_wins.source, env_wins.target) == ("env", str(tmp_path / "env.db"))
    project_wins = resolve_db(None, env={**env, "KANBAN_DB": ""}, cwd=deep)
    assert (project_wins.source, project_wins.path) == ("project",
                                                        project / ".kanban" / "kanban.db")
    user = resolve_db(None, env={"XDG_DATA_HOME": str(tmp_path / "data")}, cwd=tmp_path)
    assert (user.source, user.path) == ("user", tmp_path / "data" / "kanban" / "kanban.db")
    assert user.home == tmp_path / "data" / "kanban"


def test_user_data_dir_falls_back_to_home(tmp_path: Path) -> None:
    location = resolve_db(env={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert location.path == tmp_path / ".local" / "share" / "kanban" / "kanban.db"


def test_the_process_environment_is_isolated(isolated_home: Path) -> None:
    location = resolve_db(cwd=isolated_home)
    assert location.source == "user"
    assert location.path.is_relative_to(isolated_home)


def test_postgres_urls_are_kept_verbatim() -> None:
    url = "postgresql://kanban@db.example/kanban"
    location = resolve_db(url, env={}, cwd=Path("/"))
    assert location.is_postgres and location.target == url
    assert resolve_db(None, env={"KANBAN_DB": "postgres://h/db"}, cwd=Path("/")).is_postgres


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_db("boards/k.db", env={}).path == tmp_path / "boards" / "k.db"


# config.toml


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_a_missing_config_gives_the_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path / "config.toml")
    assert config.limits == Limits() and config.profile("default") == BUILTIN_PROFILES["default"]
    assert config.profile("default").toolsets == Profile().toolsets == ("kanban",)


def test_a_valid_config_is_parsed(tmp_path: Path) -> None:
    path = write_config(tmp_path, """
[limits]
lease_s = 10
max_workers = 4
synchronous = "FULL"

[profiles.coder]
model = "scripted:demo"
toolsets = ["kanban", "shell"]
timeout_s = 120
token_budget = 5000
""")
    config = load_config(path)
    assert (config.limits.lease_s, config.limits.max_workers) == (10.0, 4)
    coder = config.profile("coder")
    assert (coder.name, coder.model, coder.toolsets, coder.timeout_s) == (
        "coder", "scripted:demo", ("kanban", "shell"), 120.0)
    known = "bash, coder, default, general, lead"
    with pytest.raises(ConfigError, match=f"unknown profile 'writer' \\(known: {known}\\)"):
        config.profile("writer")


BAD_CONFIGS = {
    "malformed toml": ("[limits\nlease_s = 1", "malformed config"),
    "unknown limit": ("[limits]\nlease = 3", r"\[limits\]: unknown key 'lease'"),
    "unknown profile key": ("[profiles.x]\nmodle = 'a'", r"\[profiles.x\]: unknown key 'modle'"),
    "profile renamed": ("[profiles.x]\nname = 'y'", "unknown key 'name'"),
    "string for float": ("[limits]\nlease_s = 'soon'", "lease_s must be a positive number"),
    "zero float": ("[limits]\nlease_s = 0", "lease_s must be a positive number"),
    "bool for int": ("[limits]\nmax_workers = true", "max_workers must be a non-negative"),
    "negative int": ("[limits]\nmax_depth = -1", "max_depth must be a non-negative integer"),
    "float for int": ("[limits]\nmax_depth = 1.5", "max_depth must be a non-negative integer"),
    "string for list": ("[profiles.x]\ntoolsets = 'kanban'", "toolsets must be a list of str"),
    "int for string": ("[profiles.x]\nmodel = 5", "model must be a string"),
    "limits not a table": ("limits = 3", r"\[limits\] must be a table"),
    "profiles not a table": ("profiles = 3", r"\[profiles\] must be a table"),
    "profile not a table": ("[profiles]\nx = 3", r"\[profiles.x\] must be a table"),
    "not utf-8": ("", "malformed config"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_names_the_file(tmp_path: Path, case: str) -> None:
    text, message = BAD_CONFIGS[case]
    path = write_config(tmp_path, text)
    if case == "not utf-8":
        path.write_bytes(b"[limits]\nlease_s = 1 # \xff\xfe\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_an_unknown_top_level_table_is_refused(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[limit]\nlease_s = 5\n")
    with pytest.raises(ConfigError, match="unknown key 'limit'"):
        load_config(path)


# PostgreSQL URLs


def test_postgres_urls_are_normalised_for_libpq() -> None:
    for url in ("postgres://kanban@db.example/kanban", "postgresql+psycopg://kanban@db.example/kanban"):
        assert normalise_url(url) == "postgresql://kanban@db.example/kanban"
    assert resolve_db("postgres://kanban@db.example/kanban", env={}).is_postgres


def test_passwords_are_hidden_when_a_url_is_shown() -> None:
    assert hide_password("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert hide_password("postgresql://u@h/db") == "postgresql://u@h/db"


def test_postgres_fixtures_skip_cleanly_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.support.db as support

    monkeypatch.setattr(support, "PG_PORT", 1)  # nothing listens there
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no PostgreSQL server"), \
            support.fresh_postgres_database():
        pytest.fail("a database was created without a server")  # pragma: no cover
    monkeypatch.setenv("CI", "true")  # in CI a missing server fails the suite instead
    with pytest.raises(pytest.fail.Exception, match="required when CI=true"), \
            support.fresh_postgres_database():
        pytest.fail("a database was created without a server")  # pragma: no cover


MORE_BAD_CONFIGS = {
    "unknown provider": ("[profiles.x]\nmodel = 'gemini:pro'",
                         r"\[profiles.x\].model = 'gemini:pro': unknown provider 'gemini'"),
    "spec without provider": ("[profiles.x]\nmodel = 'gpt-4o'",
                              "'gpt-4o': a model spec looks like openai:MODEL"),
    "spec without model": ("[profiles.default]\nmodel = 'openai:'", "a model spec looks like"),
    "lease too long": ("[limits]\nlease_s = 86400",
                       r"\[limits\].lease_s = 86400 is out of range \(1 to 3600\)"),
    "no attempts": ("[profiles.x]\nmax_attempts = 0", r"max_attempts = 0 is out of range"),
    "zero turns": ("[profiles.x]\nmax_turns = 0", "max_turns = 0 is out of range"),
    "too many workers": ("[limits]\nmax_workers = 100000", "max_workers = 100000 is out"),
    "base url": ("[profiles.x]\nbase_url = 'localhost:11434'", "must be an http:// or https://"),
    "no toolsets": ("[profiles.x]\ntoolsets = []", "toolsets is empty"),
    "bad profile name": ("[profiles.'a b']\nmax_turns = 3", "a profile name is 1-64"),
}


@pytest.mark.parametrize("case", list(MORE_BAD_CONFIGS))
def test_values_are_validated_when_loaded(tmp_path: Path, case: str) -> None:
    text, message = MORE_BAD_CONFIGS[case]
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: [")
    assert "\n" not in str(caught.value)


def test_config_providers_match_the_agent_runtime() -> None:
    from kanban.agent.model import PROVIDERS
    from kanban.state.profile_parse import MODEL_PROVIDERS

    assert set(MODEL_PROVIDERS) == set(PROVIDERS)
