"""No scan on a hot path: every statement the dispatcher, the claim, the worker's writes, the
completion, cron, the board view, the web board, a /metrics scrape and the CLI's reads run is
served by an index.

The catalogue is not a list of SQL strings kept beside the code: it is the hot operations
themselves (a real `kanban dispatch --once` pass that claims, spawns, ticks and reaps, the
worker's library calls, and every read command of the CLI, run in this process), on a board
of 100,000 finished cards, while every statement the database driver is handed is traced
(tests/support/statements.py); each traced statement is then explained and a scan names the
code that sent it. SQLite fails on a `SCAN` of card, run,
event or message (a walk of a queue's partial index is allowed: it stops at the LIMIT), or
on sorting every match of a statement that returns a LIMIT of them;
PostgreSQL, with fresh statistics, fails on a `Seq Scan` of those tables.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kanban import approvals, claims, control, gc, run_activity
from kanban.batch_writes import ActivityWrite, Completion, Renewal
from kanban.card_filter import CardFilter
from kanban.cards import NewCard, card_detail_plan
from kanban.changes import changes_plan
from kanban.cli.app import main as kanban_main
from kanban.columns import column_plan
from kanban.cron.firing import fire_due_jobs
from kanban.group_commit import GroupCommitter
from kanban.metrics import read_aggregates
from kanban.queries import board_snapshot_plan, card_page_plan
from kanban.readmodels import transcript_plan
from kanban.service import Kanban
from kanban.state.plans import run_plan
from kanban.state.store import Conn, Database
from kanban.transitions import Actor
from tests.support.db import DEFAULT_BOARD, FakeClock, open_postgres, open_sqlite
from tests.support.seed import seed_finished
from tests.support.statements import Statements, tracing_postgres, tracing_sqlite

BOARD_SIZE = 100_000
WATCHED = ("card", "run", "event", "message", "card_search")
# Partial indexes over a queue (ready, running, scheduled cards, and todo ones waiting on
# dependencies): walking one is bounded by the work in flight, not by the board's size.
QUEUE_INDEXES = ("ix_card_ready_queue", "ix_card_running_lease", "ix_card_scheduled",
                 "ix_card_todo", "ix_card_running", "ix_card_waiting")
# What a person reads most, each run as the real command in this process.
CLI_READS = (("board",), ("board", "--json"), ("list",), ("list", "--all"), ("status",),
             ("show", "1"), ("log", "1"), ("search", "parser"), ("workers",), ("stats",),
             ("cron", "list"), ("context", "1"))

Recorded = dict[str, Any]
# Sorts of a set that is bounded before it is sorted, by the code that sends them (and why).
BOUNDED_SORTS = {
    ("kanban/search.py", "search"): "ranks at most WINDOW hits of each source, each found "
                                    "through its own full-text index",
}


@contextmanager
def recording() -> Iterator[Recorded]:
    """Every statement sent through a `Conn` inside the block (with its last params)."""
    seen: Recorded = {}
    execute = Conn.execute

    def record(self: Conn, sql: str, params: Any = None) -> Any:
        seen[sql] = params
        return execute(self, sql, params)

    Conn.execute = record  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Conn.execute = execute  # type: ignore[method-assign]


def hot_operations(kb: Kanban, clock: FakeClock) -> None:
    """What a busy dispatcher, its workers and the board viewers do, once each."""
    db = kb.db
    upstream = kb.add_card(NewCard("upstream", goal="do it", priority=3))
    downstream = kb.add_card(NewCard("downstream", depends_on=[upstream.id]))
    kb.add_card(NewCard("later", run_at=clock.now + timedelta(seconds=1)))
    with db.write() as conn:
        dispatcher = control.register_dispatcher(
            conn, host="here", pid=1, now=clock.now, board=None, instance="i-1")
    with db.read() as conn:
        claims.has_claimable(conn, now=clock.now)
        claims.next_due(conn, now=clock.now)
    claim = kb.claim(1, lease_s=30, dispatcher_id=dispatcher, host="here")[0]
    actor = Actor(f"card:#{claim.card_id}", claim.claim_token)
    with db.write() as conn:
        claims.set_run_process(conn, claim.run_id, pid=2, host="here", proc_start=3)
        control.beat_dispatcher(conn, dispatcher, clock.now)
    kb.heartbeat(claim.card_id, claim.claim_token, run_id=claim.run_id, lease_s=30, note="hi")
    with db.write() as conn:
        claims.append_message(conn, claim.run_id, 1, {"role": "user", "content": "go"},
                              now=clock.now)
        claims.record_usage(conn, claim.run_id, claim.card_id, "scripted:x", input_tokens=1,
                            output_tokens=1, cached_tokens=0, now=clock.now, cost=0.0)
        run_activity.record_activity(conn, claim.run_id, claim.card_id, claim.claim_token,
                               {"tool": "terminal"}, now=clock.now)
    with db.read() as conn:
        claims.running_leases(conn)
        claims.is_current(conn, claim.card_id, claim.claim_token)
    kb.complete(claim.card_id, "all done", actor=actor)
    assert kb.card(downstream.id).status == "ready"  # promoted where its dependency finished
    clock.advance(2)
    kb.promote_ready()  # the dispatcher's safety sweeps
    kb.resume_settled()
    fire_due_jobs(db, clock.now)
    second = kb.claim(2, lease_s=30, dispatcher_id=dispatcher, host="here")
    batched = second[1]  # its worker's writes, group-committed (kanban.group_commit)
    GroupCommitter(db, kb.clock).write_all([
        Renewal(batched.card_id, batched.claim_token, batched.run_id, 30, note="n"),
        ActivityWrite(batched.card_id, batched.claim_token, batched.run_id, {"tool": "x"}),
        Completion(batched.card_id, batched.claim_token, "done", "worker")])
    assert kb.card(batched.card_id).status == "done"
    with db.write() as conn:
        claims.record_exit(conn, second[0].run_id, 0)
        # its worker asks to run a command: the board lists the pending approval
        approvals.request(conn, second[0].card_id, "rm -rf build", "rm", now=clock.now,
                          run_id=second[0].run_id,
                          actor=Actor(f"card:#{second[0].card_id}", second[0].claim_token))
    kb.add_card(NewCard("tomorrow", run_at=clock.now + timedelta(days=1)))  # scheduled column
    gc.collect(db, Path("/nonexistent"), older_than=timedelta(days=90), now=clock.now)
    with db.read() as conn:
        snapshot = run_plan(conn, board_snapshot_plan(DEFAULT_BOARD, now=clock.now))
        assert snapshot.approvals and snapshot.columns["scheduled"]
        done = run_plan(conn, column_plan(DEFAULT_BOARD, "done", limit=20))
        if done.next:
            run_plan(conn, column_plan(DEFAULT_BOARD, "done", limit=20, after=done.next))
        run_plan(conn, card_detail_plan(claim.card_id))
        run_plan(conn, card_page_plan(CardFilter(board=DEFAULT_BOARD), 50))  # kanban list
        run_plan(conn, transcript_plan(claim.card_id))
        run_plan(conn, changes_plan(snapshot.cursor - 5, now=clock.now))


def _explain_sqlite(db: Database, sql: str, params: Any) -> list[str]:
    with db.read() as conn:
        return [row[3] for row in conn.all("EXPLAIN QUERY PLAN " + sql, params)]


def _sqlite_scans(db: Database, sql: str, params: Any) -> list[str]:
    """Plan lines that walk a whole watched table (aliases resolved from the statement)."""
    aliases = {alias: table for table, alias in re.findall(
        r"\b(?:FROM|JOIN|UPDATE)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", sql, re.IGNORECASE)
        if alias and alias.upper() not in _KEYWORDS}
    bad = []
    limited = re.search(r"\bLIMIT\b", sql, re.IGNORECASE) is not None
    for line in _explain_sqlite(db, sql, params):
        if limited and line.startswith("USE TEMP B-TREE FOR ORDER BY"):
            bad.append(line)  # sorts every match to return a few: not what the index is for
            continue
        found = re.match(r"SCAN (\w+)", line)
        if not found:
            continue
        table = aliases.get(found.group(1), found.group(1))
        if table in WATCHED and not any(index in line for index in QUEUE_INDEXES):
            bad.append(line)
    return bad


_KEYWORDS = {"WHERE", "SET", "JOIN", "LEFT", "ON", "ORDER", "GROUP", "LIMIT", "INNER",
             "USING", "NATURAL", "CROSS", "VALUES", "SELECT", "RETURNING"}


def _postgres_scans(db: Database, sql: str, params: Any) -> list[str]:
    with db.read() as conn:  # rolled back: an explained write changes nothing
        # traced at the driver: the statement is already in psycopg's own form
        lines = [row[0] for row in conn.raw.execute("EXPLAIN " + sql, params).fetchall()]
    return [line.strip() for line in lines
            if re.search(r"Seq Scan on (\w+)", line)
            and re.search(r"Seq Scan on (\w+)", line).group(1) in WATCHED]  # type: ignore[union-attr]


def _explainable(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)[0].upper()
    return head in {"SELECT", "UPDATE", "DELETE", "WITH", "INSERT"} and " FROM " in sql.upper()


def check_plans(db: Database, traced: Statements,
                scans: Callable[[Database, str, Any], list[str]]) -> None:
    failures = []
    for sql, (params, caller) in traced.seen.items():
        if not _explainable(sql):
            continue
        bad = scans(db, sql, params)
        if _sorts_a_bounded_set(caller):
            bad = [line for line in bad if "FOR ORDER BY" not in line]
        if bad:
            failures.append(f"{caller}: {' '.join(sql.split())[:300]}\n    -> {bad}")
    assert len(traced) > 60  # the catalogue really ran
    assert not failures, "statements that scan a table:\n" + "\n".join(failures)


def _sorts_a_bounded_set(caller: str) -> bool:
    place, _, function = caller.partition(" ")
    return (place.split(":")[0], function) in BOUNDED_SORTS


def kanban_command(target: str, *args: str) -> None:
    """The real `kanban` command, run in this process (its statements are traced)."""
    try:
        kanban_main(["--db", target, *args])
    except SystemExit as exc:
        assert exc.code in (0, None), f"kanban {' '.join(args)} exited {exc.code}"


def dispatcher_pass(target: str, home: Path, kb: Kanban) -> None:
    """`kanban dispatch --once` over the board: it registers, ticks (rescue, promotions,
    waiting cards, cron), claims what is ready, spawns scripted workers, reaps them, stops."""
    script = home / "finish.json"
    script.write_text(json.dumps([{"tool_calls": [
        {"name": "kanban_complete", "arguments": {"summary": "done"}}]}]))
    (home / "config.toml").write_text(f'[profiles.default]\nmodel = "scripted:{script}"\n')
    card = kb.add_card(NewCard("dispatched", goal="finish"))
    kanban_command(target, "dispatch", "--once")
    assert kb.card(card.id).status == "done"


def cli_reads(target: str, card_id: int) -> None:
    for args in CLI_READS:
        kanban_command(target, *[str(card_id) if a == "1" else a for a in args])


def traced_run(db: Database, clock: FakeClock, target: str, home: Path) -> None:
    kb = Kanban(db, clock=clock)
    first = kb.add_card(NewCard("write the parser", goal="parse")).id
    hot_operations(kb, clock)
    dispatcher_pass(target, home, kb)
    cli_reads(target, first)
    read_aggregates(db)  # a /metrics scrape (the web board's and a dispatcher's)


def test_sqlite_hot_statements_use_indexes(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    path = tmp_path / "kanban.db"
    seeded = open_sqlite(path)
    seed_finished(seeded, BOARD_SIZE, board=DEFAULT_BOARD, at=clock.now - timedelta(days=60))
    seeded.dispose()
    with tracing_sqlite() as traced:
        db = open_sqlite(path)
        try:
            traced_run(db, clock, str(path), tmp_path)
        finally:
            db.dispose()
    db = open_sqlite(path)
    try:
        check_plans(db, traced, _sqlite_scans)
    finally:
        db.dispose()


@pytest.mark.postgres
def test_postgres_hot_statements_use_indexes(pg_url: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    seeded = open_postgres(pg_url)
    seed_finished(seeded, BOARD_SIZE, board=DEFAULT_BOARD, at=clock.now - timedelta(days=60))
    seeded.dispose()
    with tracing_postgres() as traced:
        db = open_postgres(pg_url)
        try:
            traced_run(db, clock, pg_url, tmp_path)
        finally:
            db.dispose()
    db = open_postgres(pg_url)
    try:
        check_plans(db, traced, _postgres_scans)
    finally:
        db.dispose()


def test_the_scan_check_catches_a_scan(tmp_path: Path) -> None:
    """The check itself can fail: an unindexed filter on card is reported, aliases too, and
    so is sorting every match for a LIMIT."""
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        assert _sqlite_scans(db, "SELECT id FROM card c WHERE c.title = :t", {"t": "x"})
        assert not _sqlite_scans(db, "SELECT id FROM card WHERE id = :id", {"id": 1})
        # the board's cards found by an index, then all sorted by title for five of them
        assert _sqlite_scans(db, "SELECT id FROM card WHERE board = 'default' "
                                 "ORDER BY title LIMIT 5", {})
        assert not _sqlite_scans(db, "SELECT id FROM card WHERE status = 'ready' "
                                     "ORDER BY priority DESC, id LIMIT 5", {})
    finally:
        db.dispose()


def test_next_due_seeks_the_first_held_back_card_instead_of_walking_the_queue(
        tmp_path: Path) -> None:
    """Nothing claimable yet (a backlog behind retry backoffs): when the next card falls due
    is one index seek, with or without a board filter, and the answer is the earliest."""
    clock = FakeClock()
    db = open_sqlite(tmp_path / "kanban.db")
    kb = Kanban(db, clock=clock)
    try:
        held = [kb.add_card(NewCard(f"held back {n}")).id for n in range(300)]
        with db.write() as conn:
            for n, card_id in enumerate(held):
                conn.run("UPDATE card SET run_after = :at WHERE id = :id",
                         {"at": clock.now + timedelta(seconds=600 - n), "id": card_id})
        for flt in (claims.ClaimFilter(), claims.ClaimFilter(board=DEFAULT_BOARD)):
            with recording() as recorded, db.read() as conn:
                due = claims.next_due(conn, now=clock.now, flt=flt)
            assert due == clock.now + timedelta(seconds=301)
            ready = [sql for sql in recorded if "status = 'ready'" in sql]
            assert ready, "next_due asked nothing about ready cards"
            for sql in ready:
                plan = _explain_sqlite(db, sql, recorded[sql])
                assert any("ix_card_ready_due" in line for line in plan), plan
    finally:
        db.dispose()
