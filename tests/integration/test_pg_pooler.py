"""The PostgreSQL store behind PgBouncer in transaction pooling mode, and a worker's lean
connections: no session state across transactions, no prepared statements, LISTEN only on
a direct URL, connections closed while idle and bounded by the dispatcher's slots."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.state.pg_fleet import LISTEN_ENV, SlotGate, connection_bound, worker_slots
from kanban.state.postgres import PostgresDatabase
from tests.support.db import open_postgres
from tests.support.pg import pg_query
from tests.support.pgbouncer import PgBouncer, pgbouncer
from tests.support.procs import wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture
def bouncer(pg_url: str, tmp_path: Path) -> Iterator[PgBouncer]:
    open_postgres(pg_url).dispose()  # the schema, made directly
    with pgbouncer(tmp_path / "pgbouncer", pool_size=2) as b:
        yield b


def _app_connections(url: str, name: str) -> int:
    return int(pg_query(url, "SELECT count(*) FROM pg_stat_activity WHERE "
                             "application_name = %s", (name,))[0][0])


def test_behind_a_transaction_pooler_every_transaction_sets_its_own_timeouts(
        pg_url: str, bouncer: PgBouncer) -> None:
    db = PostgresDatabase(bouncer.url(pg_url), statement_timeout_s=7)
    try:
        for _ in range(30):  # far past psycopg's prepare threshold: nothing is prepared
            with db.read() as conn:
                assert conn.scalar("SELECT current_setting('statement_timeout')") == "7s"
            with db.write() as conn:
                conn.run("INSERT INTO setting (key, value) VALUES ('k', 'v') "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value")
            with db.statement() as conn:
                assert conn.scalar("SELECT value FROM setting WHERE key = :k", {"k": "k"}) \
                    == "v"
        assert db.pooled is True
        with db.read() as conn:
            assert conn.scalar("SELECT count(*) FROM pg_prepared_statements") == 0
        # Outside kanban's transactions the pooled server sessions keep no timeout of ours.
        assert pg_query(bouncer.url(pg_url), "SHOW statement_timeout") == [("0",)]
    finally:
        db.dispose()


def test_two_processes_worth_of_statements_share_server_sessions_without_clashes(
        pg_url: str, bouncer: PgBouncer) -> None:
    dbs = [PostgresDatabase(bouncer.url(pg_url)) for _ in range(4)]
    errors: list[BaseException] = []

    def hammer(db: PostgresDatabase) -> None:
        try:
            for n in range(40):
                with db.write() as conn:
                    conn.run("INSERT INTO setting (key, value) VALUES (:k, 'x') "
                             "ON CONFLICT (key) DO NOTHING", {"k": f"{id(db)}-{n}"})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(db,)) for db in dbs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        for db in dbs:
            db.dispose()
    assert errors == []
    assert pg_query(pg_url, "SELECT count(*) FROM setting WHERE value = 'x'") == [(160,)]


def test_listen_needs_a_direct_url_behind_a_pooler(pg_url: str, bouncer: PgBouncer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    db = PostgresDatabase(bouncer.url(pg_url))
    direct = PostgresDatabase(pg_url)
    try:
        monkeypatch.delenv(LISTEN_ENV, raising=False)
        assert db.listening_url() is None
        assert direct.listening_url() == pg_url
        monkeypatch.setenv(LISTEN_ENV, pg_url)
        assert db.listening_url() == pg_url
        conn = db.listen()
        conn.close()
        monkeypatch.setenv(LISTEN_ENV, "off")
        assert direct.listening_url() is None
    finally:
        db.dispose()
        direct.dispose()


def test_a_workers_connection_is_closed_while_it_waits(pg_url: str) -> None:
    name = "kanban-lean-test"
    db = PostgresDatabase(f"{pg_url}?application_name={name}")
    try:
        db.for_worker(None)
        with db.read() as conn:
            conn.scalar("SELECT 1")
            # counted while in use: idle, it may be gone before a busy machine looks
            assert _app_connections(pg_url, name) == 1
        wait_until(lambda: _app_connections(pg_url, name) == 0, timeout=10,
                   what="the idle connection closed")
        with db.write() as conn:  # and it comes back when needed
            conn.scalar("SELECT 1")
    finally:
        db.dispose()


def test_slots_bound_the_connections_of_many_workers(pg_url: str, tmp_path: Path) -> None:
    name = "kanban-slots-test"
    gate = SlotGate(tmp_path / "slots", 2).create()
    dbs = [PostgresDatabase(f"{pg_url}?application_name={name}") for _ in range(6)]
    most = 0
    errors: list[BaseException] = []

    def work(db: PostgresDatabase) -> None:
        nonlocal most
        try:
            for _ in range(5):
                with db.write() as conn:
                    conn.scalar("SELECT pg_sleep(0.02)")
                    most = max(most, _app_connections(pg_url, name))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    for db in dbs:
        db.for_worker(gate.env_value)
    threads = [threading.Thread(target=work, args=(db,)) for db in dbs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        for db in dbs:
            db.dispose()
    assert errors == []
    assert 1 <= most <= 2
    assert gate.taken() == 0  # every slot free again


def test_the_documented_bound() -> None:
    assert worker_slots(1) == 3 and worker_slots(64) == 12 and worker_slots(65) == 14
    assert connection_bound(64) == 17
    assert 4 * connection_bound(64) < 100  # four dispatchers of 64 fit a stock server


def test_no_connection_left_is_transient_never_a_crash(pg_url: str, tmp_path: Path) -> None:
    """PgBouncer out of client slots (as a server out of max_connections): a transaction
    waits and then fails as a transient error (the breaker's kind, no attempt spent);
    once a connection frees up it goes through."""
    import psycopg

    from kanban.state.errors import TransientDatabaseError
    from kanban.state.pg_faults import is_transient

    full = psycopg.OperationalError("connection failed: FATAL:  sorry, too many clients "
                                    "already")
    assert is_transient(full, connecting=True)
    open_postgres(pg_url).dispose()
    with pgbouncer(tmp_path / "pgbouncer", pool_size=2, max_clients=1) as b:
        url = b.url(pg_url)
        hogs = []
        while True:  # PgBouncer lets one client past max_client_conn: fill it up
            try:
                hogs.append(psycopg.connect(url, autocommit=True, connect_timeout=5))
            except psycopg.OperationalError as exc:
                assert "no more connections allowed" in str(exc)
                break
        db = PostgresDatabase(url, patience_s=1.0)
        try:
            with pytest.raises(TransientDatabaseError), \
                    db.read():
                pass  # pragma: no cover
            hogs.pop().close()
            with db.read() as conn:
                assert conn.scalar("SELECT 1") == 1
        finally:
            for hog in hogs:
                hog.close()
            db.dispose()
