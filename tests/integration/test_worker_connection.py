"""A worker process keeps one SQLite connection for all its threads (`for_worker`), taken by
one thread's transaction at a time; nested transactions, errors and forks keep working."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kanban.state.errors import DatabaseError
from kanban.state.sqlite import SQLiteDatabase
from tests.support.db import open_sqlite

THREADS = 4
ROUNDS = 150


def board_descriptors(path: Path) -> int:
    """How many descriptors this process holds on the board's file."""
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == target
        except OSError:
            continue
    return count


def on_threads(*jobs: object) -> None:
    errors: list[BaseException] = []

    def run(job: object) -> None:
        try:
            job()  # type: ignore[operator]
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors


def counter(db: SQLiteDatabase) -> int:
    with db.read() as conn:
        return int(conn.scalar("SELECT value FROM setting WHERE key = 'counter'"))


@pytest.fixture
def worker_db(tmp_path: Path) -> SQLiteDatabase:
    db = open_sqlite(tmp_path / "kanban.db")
    assert isinstance(db, SQLiteDatabase)
    with db.write() as conn:
        conn.execute("INSERT INTO setting (key, value) VALUES ('counter', '0')")
    db.dispose()
    return db


def test_threads_of_a_worker_share_one_connection(worker_db: SQLiteDatabase) -> None:
    def read() -> None:
        counter(worker_db)

    worker_db.for_worker(None)
    on_threads(read, read, read)
    read()
    assert board_descriptors(worker_db.path) == 1
    worker_db.dispose()
    assert board_descriptors(worker_db.path) == 0


def test_elsewhere_each_thread_keeps_its_own(worker_db: SQLiteDatabase) -> None:
    """The control: without for_worker, three threads and this one hold four."""
    held = threading.Barrier(4)

    def read() -> None:
        counter(worker_db)
        held.wait(30)  # each thread's connection open at once

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    read()
    for thread in threads:
        thread.join(30)
    assert board_descriptors(worker_db.path) == 4
    worker_db.dispose()


def test_transactions_of_several_threads_take_turns(worker_db: SQLiteDatabase) -> None:
    """Read-then-write from four threads at once: no update lost, nothing refused as a
    misuse of one connection by two threads."""
    worker_db.for_worker(None)

    def bump() -> None:
        for _ in range(ROUNDS):
            with worker_db.write() as conn:
                value = int(conn.scalar("SELECT value FROM setting WHERE key = 'counter'"))
                conn.execute("UPDATE setting SET value = :v WHERE key = 'counter'",
                             {"v": str(value + 1)})
            worker_db.write_one("UPDATE setting SET value = value WHERE key = 'counter'")

    on_threads(*([bump] * THREADS))
    assert counter(worker_db) == THREADS * ROUNDS
    assert board_descriptors(worker_db.path) == 1


def test_another_thread_waits_for_a_transaction_to_end(worker_db: SQLiteDatabase) -> None:
    worker_db.for_worker(None)
    inside, seen = threading.Event(), []

    def reader() -> None:
        inside.wait(30)
        seen.append(counter(worker_db))  # its turn comes after the commit below

    thread = threading.Thread(target=reader)
    thread.start()
    with worker_db.write() as conn:
        inside.set()
        assert not thread.join(0.2) and thread.is_alive()  # waiting for its turn
        conn.execute("UPDATE setting SET value = '7' WHERE key = 'counter'")
    thread.join(30)
    assert seen == [7]


def test_a_nested_read_on_the_same_thread_does_not_wait_for_itself(
        worker_db: SQLiteDatabase) -> None:
    worker_db.for_worker(None)
    with worker_db.write() as conn:
        conn.execute("UPDATE setting SET value = '3' WHERE key = 'counter'")
        assert counter(worker_db) == 0  # its own short-lived connection: not yet committed
    assert counter(worker_db) == 3


def test_a_connection_dropped_after_an_error_is_replaced_for_every_thread(
        worker_db: SQLiteDatabase) -> None:
    worker_db.for_worker(None)
    counter(worker_db)
    with pytest.raises(DatabaseError), worker_db.read() as conn:
        conn.execute("SELECT * FROM no_such_table")
    on_threads(lambda: counter(worker_db))
    assert counter(worker_db) == 0
    assert board_descriptors(worker_db.path) == 1


def test_a_thread_that_fails_inside_its_transaction_gives_its_turn_back(
        worker_db: SQLiteDatabase) -> None:
    worker_db.for_worker(None)

    def fail() -> None:
        with worker_db.write() as conn:
            conn.execute("UPDATE setting SET value = '9' WHERE key = 'counter'")
            raise RuntimeError("the body failed")

    with pytest.raises(RuntimeError):
        fail()
    on_threads(lambda: counter(worker_db))  # would wait forever on a turn never given back
    assert counter(worker_db) == 0


def test_a_forked_child_opens_its_own(worker_db: SQLiteDatabase) -> None:
    worker_db.for_worker(None)
    assert counter(worker_db) == 0
    pid = os.fork()
    if pid == 0:  # the child: never the parent's connection
        code = 1
        try:
            with worker_db.write() as conn:
                conn.execute("UPDATE setting SET value = '5' WHERE key = 'counter'")
            code = 0 if board_descriptors(worker_db.path) == 2 else 2  # inherited + its own
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert counter(worker_db) == 5


def test_the_connection_a_spare_opened_is_the_one_kept(worker_db: SQLiteDatabase) -> None:
    counter(worker_db)  # opened before the card is known, on the main thread
    before = board_descriptors(worker_db.path)
    worker_db.for_worker(None)
    on_threads(lambda: counter(worker_db))
    assert board_descriptors(worker_db.path) == before == 1
