"""The PostgreSQL store itself: pool, timeouts, transient errors, the server's clock,
round trips of the hot path, and LISTEN/NOTIFY wake-ups. Skipped without a server."""

from __future__ import annotations

import os
import re
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kanban.cards import NewCard, add_card
from kanban.dispatcher.wake import NotifyWatcher, change_watcher
from kanban.service import Kanban
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.postgres import POOL_MAX, PostgresDatabase, is_transient
from kanban.state.store import Conn, Database
from tests.support.db import claim_one, open_postgres, worker
from tests.support.pg import (
    UNDO_CARD_SEARCH,
    database_outage,
    pg_query,
    terminate_backends,
)
from tests.support.procs import wait_until

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg(pg_url: str) -> Database:
    db = open_postgres(pg_url)
    yield db
    db.dispose()


def test_connections_carry_timeouts_and_a_name(pg: Database) -> None:
    with pg.read() as conn:
        assert conn.scalar("SHOW statement_timeout") == "1min"
        assert conn.scalar("SHOW idle_in_transaction_session_timeout") == "2min"
        assert conn.scalar("SELECT application_name FROM pg_stat_activity "
                           "WHERE pid = pg_backend_pid()") == "kanban"


def test_the_clock_is_the_servers(pg: Database) -> None:
    ours = pg.clock()
    (server,) = pg_query(pg.target, "SELECT clock_timestamp()")[0]
    assert abs((server - ours).total_seconds()) < 0.5
    assert Kanban(pg).clock == pg.clock  # the board records server time by default


def test_terminated_backends_are_replaced_without_an_error(pg: Database) -> None:
    kb = Kanban(pg)
    card = kb.add_card(NewCard("before"))
    assert terminate_backends(pg.target) >= 1  # the pool's idle connection, at least
    wait_until(lambda: _backends(pg.target) == 0, timeout=10, what="the backends gone")
    assert kb.card(card.id).title == "before"  # the dead connection was noticed, replaced
    assert kb.add_card(NewCard("after")).id == card.id + 1


def test_a_backend_lost_inside_a_transaction_is_a_transient_error(pg: Database) -> None:
    with pytest.raises(TransientDatabaseError) as raised, pg.write() as conn:
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    assert not raised.value.in_doubt
    with pg.read() as conn:  # the next transaction has a fresh connection
        assert conn.scalar("SELECT 1") == 1


def test_an_outage_is_waited_out_within_patience(pg_url: str) -> None:
    db = open_postgres(pg_url)
    db.patience_s = 30
    kb = Kanban(db)
    ended = threading.Event()
    try:
        with database_outage(pg_url):
            reader = threading.Thread(target=lambda: (kb.boards(), ended.set()))
            reader.start()
            assert not ended.wait(0.5)  # waiting for the server, not failing
        reader.join(timeout=30)
        assert ended.is_set()
    finally:
        db.dispose()


def test_no_patience_left_is_a_clear_transient_error(pg_url: str) -> None:
    db = PostgresDatabase(pg_url, patience_s=0.5)
    try:
        with database_outage(pg_url), pytest.raises(TransientDatabaseError,
                                                    match="not currently accepting"), db.read():
            pass  # pragma: no cover
    finally:
        db.dispose()


def test_an_interrupt_during_begin_gives_the_connection_back(
        pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C lands while the checkout's BEGIN is on the wire: the connection goes back to
    the pool (closed, to be replaced), not lost to it; `kanban run`'s own dispatcher needs
    the pool's few connections to hand its cards back."""
    import psycopg

    open_postgres(pg_url).dispose()
    db = PostgresDatabase(pg_url, patience_s=10, pool_max=1)
    execute = psycopg.Connection.execute
    armed = [True]

    def interrupted(self: psycopg.Connection[Any], query: Any, *args: Any,
                    **kwargs: Any) -> Any:
        cursor = execute(self, query, *args, **kwargs)
        if query == "BEGIN" and armed:
            armed.clear()
            raise KeyboardInterrupt
        return cursor

    try:
        with db.read() as conn:  # the pool's one connection, made and checked in
            conn.scalar("SELECT 1")
        monkeypatch.setattr(psycopg.Connection, "execute", interrupted)
        with pytest.raises(KeyboardInterrupt), db.write():
            pytest.fail("the body ran")
        assert not armed
        stats = db._pool_().get_stats
        wait_until(lambda: stats()["pool_size"] == stats()["pool_available"], timeout=10,
                   what="no connection still out of the pool")
        with db.write() as conn:
            assert conn.scalar("SELECT 1") == 1
    finally:
        db.dispose()


def test_bad_credentials_or_database_are_not_transient(pg_url: str) -> None:
    missing = PostgresDatabase(pg_url.rsplit("/", 1)[0] + "/no_such_kanban_db", patience_s=5)
    try:
        with pytest.raises(DatabaseError, match="does not exist") as raised, missing.read():
            pass  # pragma: no cover
        assert not isinstance(raised.value, TransientDatabaseError)
    finally:
        missing.dispose()


def test_serialization_failures_and_deadlocks_are_transient() -> None:
    import psycopg

    assert is_transient(psycopg.errors.SerializationFailure())
    assert is_transient(psycopg.errors.DeadlockDetected())
    assert is_transient(psycopg.errors.AdminShutdown())
    assert not is_transient(psycopg.errors.UniqueViolation())


def _round_trips(trace: Path) -> int:
    """Messages after which the client waits for the server: Sync (extended protocol) or
    Query (simple protocol)."""
    fields = [line.split("\t") for line in trace.read_text().splitlines()]
    return sum(1 for f in fields if len(f) > 2 and f[0] == "F" and f[2] in ("Sync", "Query"))


def test_claim_and_complete_take_at_most_four_round_trips(pg: Database,
                                                          tmp_path: Path) -> None:
    from psycopg import pq

    one = PostgresDatabase(pg.target, pool_max=1)  # one connection: every statement on it
    kb = Kanban(one)
    first = kb.add_card(NewCard("first"))
    kb.add_card(NewCard("then", depends_on=[first.id]))  # completing also promotes this
    trace = tmp_path / "libpq.trace"
    with one.read() as conn:
        raw = conn.raw
    with open(trace, "w") as out:
        raw.pgconn.trace(out.fileno())
        raw.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        claim = claim_one(kb, first.id)
        kb.complete(first.id, "done", actor=worker(claim))
        raw.pgconn.untrace()
    assert _round_trips(trace) == 2, trace.read_text()  # the goal: at most 4
    assert kb.card(first.id).status == "done"
    assert [c.status for c in kb.list_cards()] == ["done", "ready"]
    one.dispose()


def _woken(watcher: NotifyWatcher, action: object) -> bool:
    event = threading.Event()
    watcher.wait(0, event)  # forget earlier changes
    thread = threading.Thread(target=action)  # type: ignore[arg-type]
    thread.start()
    changed = watcher.wait(10, event)
    thread.join()
    return changed


def test_statements_run_often_are_prepared_on_a_direct_connection(pg: Database) -> None:
    for _ in range(12):  # past the threshold on each of the pool's connections
        with pg.statement() as conn:
            assert conn.scalar("SELECT count(*) FROM board WHERE name = :n", {"n": "x"}) == 0
    with pg.read() as conn:
        prepared = conn.column("SELECT statement FROM pg_prepared_statements")
    assert any("FROM board WHERE name" in text for text in prepared), prepared


def test_a_table_changed_under_prepared_statements_costs_one_error_per_connection(
        pg: Database) -> None:
    """Another process migrates (adds a column) while statements returning that table's
    rows are prepared: a connection's first call after it fails as transient, and every
    later call works, the connection's other prepared statements included."""
    pg_query(pg.target, "CREATE TABLE shape (id integer)")
    pg_query(pg.target, "INSERT INTO shape VALUES (1)")
    first, second = "SELECT * FROM shape", "SELECT * FROM shape WHERE id > :n"
    for _ in range(12):
        with pg.statement() as conn:
            assert conn.all(first) == [(1,)]
            assert conn.all(second, {"n": 0}) == [(1,)]
    with pg.read() as conn:
        assert conn.scalar("SELECT count(*) FROM pg_prepared_statements") >= 2
    pg_query(pg.target, "ALTER TABLE shape ADD COLUMN extra integer DEFAULT 7")
    failed: list[int] = []  # the server process of each failure's connection
    for _ in range(3 * POOL_MAX):
        backend = None
        try:
            with pg.statement() as conn:
                backend = conn.raw.info.backend_pid
                assert conn.all(first) == [(1, 7)]
                assert conn.all(second, {"n": 0}) == [(1, 7)]
        except TransientDatabaseError as exc:
            assert "cached plan must not change result type" in str(exc)
            assert backend is not None
            failed.append(backend)
    assert failed and len(failed) == len(set(failed)), failed


def test_a_prepared_claims_generic_plan_reads_card_by_index(
        pg: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a few claims PostgreSQL may run a prepared claim on its generic plan, made
    without the statement's values. With LIMIT a parameter, that plan expected a tenth of
    the board and joined `card` by a full scan; kanban writes the limit into the text."""
    kb = Kanban(pg)
    with pg.write() as conn:
        for i in range(3000):
            add_card(conn, NewCard(f"card {i}"), kb.clock())
    pg_query(pg.target, "ANALYZE card")
    sent: list[str] = []
    execute = Conn.execute

    def noted(self: Conn, sql: str, params: Any = None) -> Any:
        sent.append(sql)
        return execute(self, sql, params)

    monkeypatch.setattr(Conn, "execute", noted)
    kb.claim(8, lease_s=60)
    monkeypatch.undo()
    claim = next(sql for sql in sent if "FOR UPDATE OF c SKIP LOCKED" in sql)
    names: list[str] = []

    def positional(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    text = re.sub(r"(?<!:):([a-z_]+)", positional, claim)
    types = {"now": "timestamptz", "lease_until": "timestamptz", "dispatcher_id": "integer",
             "host": "text", "actor": "text", "board": "text", "n": "integer"}
    values = {"now": "now()", "lease_until": "now()", "dispatcher_id": "NULL", "host": "'h'",
              "actor": "'a'", "board": "'default'", "n": "8"}
    with pg.read() as conn:
        conn.execute(f"PREPARE claim_plan ({', '.join(types[n] for n in names)}) AS {text}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            plan = "\n".join(conn.column(
                f"EXPLAIN EXECUTE claim_plan ({', '.join(values[n] for n in names)})"))
        finally:
            conn.execute("RESET plan_cache_mode")
            conn.execute("DEALLOCATE claim_plan")
    assert "Seq Scan on card" not in plan, plan
    assert "card_pkey" in plan and "ix_card_ready_queue" in plan, plan


def test_notifications_wake_the_watcher(pg: Database) -> None:
    kb = Kanban(pg)
    watcher = change_watcher(pg)
    assert isinstance(watcher, NotifyWatcher)
    try:
        assert watcher.listening.wait(10)
        parent = kb.add_card(NewCard("parent"))
        claim = claim_one(kb, parent.id)
        assert _woken(watcher, lambda: kb.add_card(NewCard("new and ready")))
        later = kb.clock() + timedelta(hours=1)  # the dispatcher then sleeps until its time
        assert _woken(watcher, lambda: kb.add_card(NewCard("scheduled", run_at=later)))
        assert _woken(watcher, lambda: kb.set_paused(True))
        assert _woken(watcher, lambda: kb.set_paused(False))
        child = kb.add_card(NewCard("child", parent_id=parent.id, priority=9))
        child_claim = claim_one(kb, child.id)
        assert _woken(watcher, lambda: kb.complete(child.id, "ok", actor=worker(child_claim)))
        assert _woken(watcher, lambda: kb.cancel(parent.id))
        del claim
        quiet = threading.Event()
        watcher.wait(0, quiet)
        kb.comment(parent.id, "no wake-up for a comment")
        assert not watcher.wait(0.3, quiet)
    finally:
        watcher.close()


def test_the_watcher_listens_again_after_its_backend_is_terminated(pg: Database) -> None:
    kb = Kanban(pg)
    watcher = change_watcher(pg)
    assert isinstance(watcher, NotifyWatcher)
    try:
        assert watcher.listening.wait(10)
        terminate_backends(pg.target)
        wait_until(lambda: watcher.listening.is_set() and _listeners(pg.target) == 1,
                   timeout=20, what="listening again")
        assert _woken(watcher, lambda: kb.add_card(NewCard("after the reconnect")))
    finally:
        watcher.close()


def _backends(url: str) -> int:
    return int(pg_query(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND pid <> pg_backend_pid()")[0][0])


def _listeners(url: str) -> int:
    return int(pg_query(url, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND query LIKE 'LISTEN%%'")[0][0])


def test_a_forked_child_never_touches_the_parents_pool(pg: Database) -> None:
    kb = Kanban(pg)
    kb.add_card(NewCard("before the fork"))
    pid = os.fork()
    if pid == 0:  # the child opens its own connections and leaves the parent's alone
        code = 0
        try:
            Kanban(pg).add_card(NewCard("from the child"))
            pg.dispose()
        except BaseException:  # noqa: BLE001 - report through the exit code
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [c.title for c in kb.list_cards()] == ["before the fork", "from the child"]


def test_server_time_drives_leases(pg: Database) -> None:
    kb = Kanban(pg)
    card = kb.add_card(NewCard("task"))
    claim = claim_one(kb, card.id)
    (server,) = pg_query(pg.target, "SELECT now()")[0]
    assert abs((claim.lease_expires_at - timedelta(seconds=30) - server).total_seconds()) < 1


def test_a_statement_locks_its_card_counters_in_one_order(pg: Database) -> None:
    """A statement that moves cards of several profiles writes their counters in one order
    (board, profile, status), whatever order it met the cards in. Written per card, two
    dispatchers on one counter shard that claimed a coder's and a writer's card in opposite
    orders each held the counter the other waited for: a deadlock, one claim aborted after
    deadlock_timeout. Here the statement meets the writer's card first; the writer's counter
    is held elsewhere, and the statement must already hold the coder's when it waits."""
    import psycopg

    kb = Kanban(pg)
    writer = kb.add_card(NewCard("meets first", profile="writer"))
    coder = kb.add_card(NewCard("meets second", profile="coder"))
    with psycopg.connect(pg.target, autocommit=True) as mover, \
            psycopg.connect(pg.target) as holder, psycopg.connect(pg.target) as prober:
        (pid,) = mover.execute("SELECT pg_backend_pid()").fetchone()
        shard = pid % 8
        prober.execute(  # the mover's shard of each counter exists, so locks are row locks
            "INSERT INTO card_count (board, profile, status, shard, n) "
            "SELECT 'default', p, s, %s, 0 FROM unnest(ARRAY['coder', 'writer']) p, "
            "unnest(ARRAY['ready', 'blocked']) s ON CONFLICT DO NOTHING", (shard,))
        prober.commit()
        lock = ("SELECT 1 FROM card_count WHERE board = 'default' AND profile = %s "
                "AND shard = %s FOR UPDATE NOWAIT")
        holder.execute(lock, ("writer", shard))  # the last in the order: held until commit
        moved = threading.Thread(target=mover.execute, args=(
            "UPDATE card SET status = 'blocked' WHERE id = ANY(%s)", ([writer.id, coder.id],)))
        moved.start()
        try:
            wait_until(lambda: prober.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                (pid,)).fetchone()[0], timeout=30, what="the move to wait for the counter")
            prober.rollback()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                prober.execute(lock, ("coder", shard))  # already taken by the waiting move
            prober.rollback()
        finally:
            holder.commit()
            moved.join(30)
    assert not moved.is_alive()
    with pg.read() as conn:
        assert dict(conn.all("SELECT profile, sum(n) FROM card_count WHERE status = 'blocked' "
                             "GROUP BY profile")) == {"coder": 1, "writer": 1}


def test_a_cards_document_is_written_when_its_text_changes_only(pg: Database) -> None:
    """The full-text document (card_search, migration 23) is a new row version when the
    card is added, edited or completed with a result; claims and heartbeats, which move
    status and lease only, leave it alone (as an index expression on `card` it was
    computed again for each of them)."""
    from kanban.edits import CardEdit

    kb = Kanban(pg)
    card = kb.add_card(NewCard("heron title", goal="egret goal", context="plover context"))

    def version() -> str:
        ((xmin,),) = pg_query(pg.target, "SELECT xmin::text FROM card_search "
                                         "WHERE card_id = %s", (card.id,))
        return str(xmin)

    added = version()
    kb.edit(card.id, CardEdit(title="curlew title"))
    edited = version()
    assert edited != added
    assert [h.card_id for h in kb.search("curlew")] == [card.id]
    assert kb.search("heron") == []
    claim = claim_one(kb, card.id)
    kb.heartbeat(card.id, claim.claim_token, run_id=claim.run_id, lease_s=60)
    assert version() == edited
    kb.complete(card.id, "found a sandpiper", actor=worker(claim))
    assert version() != edited
    assert [h.card_id for h in kb.search("sandpiper")] == [card.id]
    assert [h.card_id for h in kb.search("plover")] == [card.id]


def test_a_card_without_its_document_gets_it_whole_at_its_next_text_change(
        pg: Database) -> None:
    """A card written with triggers off (a bulk load under session_replication_role =
    replica) has no document; the completion, which would parse its result only, writes
    the whole document instead of updating nothing."""
    kb = Kanban(pg)
    card = kb.add_card(NewCard("ibis title", goal="spoonbill goal"))
    pg_query(pg.target, "DELETE FROM card_search WHERE card_id = %s", (card.id,))
    assert kb.search("spoonbill") == []
    claim = claim_one(kb, card.id)
    kb.complete(card.id, "saw a stork", actor=worker(claim))
    assert [h.card_id for h in kb.search("spoonbill")] == [card.id]
    assert [h.card_id for h in kb.search("stork")] == [card.id]


def test_migration_23_gives_existing_cards_their_documents(pg_url: str) -> None:
    """A board migrated before 23: its cards are found by their text after the upgrade."""
    from kanban.state.db import open_database
    from kanban.state.paths import DbLocation

    db = open_postgres(pg_url)
    kb = Kanban(db)
    ids = [kb.add_card(NewCard(f"kestrel {i}", goal=f"osprey goal {i}")).id for i in range(3)]
    db.dispose()
    for statement in (*UNDO_CARD_SEARCH, "DELETE FROM schema_migration WHERE id = 23"):
        pg_query(pg_url, statement)
    upgraded = open_database(DbLocation(pg_url, "flag"))
    try:
        assert sorted(h.card_id for h in Kanban(upgraded).search("osprey")) == ids
        assert pg_query(pg_url, "SELECT count(*) FROM pg_indexes "
                                "WHERE indexname = 'ix_card_search'") == [(0,)]
    finally:
        upgraded.dispose()

