"""What a worker cannot do: reach another board or card, step outside its toolset or its
limits, see credentials it does not need, or write anything once its lease is lost.

The probes are scripted models run by real dispatchers and workers (subprocesses).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kanban import comments, transitions
from kanban.agent.types import ToolCall
from kanban.errors import LeaseLost
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.states import Outcome
from kanban.tools.catalog import REGISTRY
from kanban.tools.scope import WorkerScope
from kanban.transitions import Actor
from tests.acceptance.conftest import BoardFiles, slow_steps
from tests.support.hostile import clean_env, proc_environ, rows
from tests.support.llm_server import LLMServer, tool_reply
from tests.support.procs import kanban, start_dispatcher, stop, wait_until

HUGE_ID = 99999999999999999999  # beyond SQLite's 64-bit integers
SECRETS = {"OPENAI_API_KEY": "sk-test-env-SECRET1", "ANTHROPIC_API_KEY": "sk-ant-env-SECRET2",
           "AWS_SECRET_ACCESS_KEY": "aws-env-SECRET3"}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@dataclass(frozen=True)
class Expect:
    """One scripted tool call, the property it probes and what its stored result must say."""

    group: str
    call: dict[str, Any]
    ok: bool
    says: str


@dataclass
class ProbeRun:
    """One `dispatch --once` over a board seeded with hostile scripted workers."""

    path: Path
    ids: dict[str, int]
    expected: dict[str, list[Expect]]
    results: dict[str, list[str]]
    before: dict[str, list[tuple[Any, ...]]]
    modes: dict[str, str]  # of the database files and logs, taken while -wal/-shm exist


def _probe_script(ids: dict[str, int]) -> list[Expect]:
    foreign, neighbour, probe = ids["foreign"], ids["neighbour"], ids["probe"]
    no_foreign = f"no card #{foreign} on board 'default'"
    cross_board = "dependencies stay on one board"
    not_allowed = "field 'card_id' is not allowed"  # complete/block take no card id at all
    return [
        Expect("board", call("kanban_show", card_id=foreign), False, no_foreign),
        Expect("board", call("kanban_comment", body="pwned", card_id=foreign), False,
               no_foreign),
        Expect("board", call("kanban_link", card_id=probe, depends_on_id=foreign), False,
               cross_board),
        Expect("board", call("kanban_link", card_id=foreign, depends_on_id=probe), False,
               no_foreign),
        Expect("board", call("kanban_create", title="x", depends_on=[foreign]), False,
               cross_board),
        Expect("card", call("kanban_complete", summary="forged", card_id=neighbour), False,
               not_allowed),
        Expect("card", call("kanban_block", reason="forged", card_id=neighbour), False,
               not_allowed),
        Expect("toolset", call("delegate", tasks=[{"title": "escape"}]), False,
               "tool delegate is not available to this agent"),
        Expect("toolset", call("shell", command="cat /etc/passwd"), False,
               "unknown tool 'shell'"),
        Expect("range", call("kanban_show", card_id=HUGE_ID), False, ""),
        *[Expect("limits", call("kanban_create", title=f"child {n}"), True, '"id"')
          for n in range(10)],
        Expect("limits", call("kanban_create", title="child 11"), False,
               f"#{probe} has made 10 child cards; 1 more would pass its limit of 10"),
        # controls: the same tools work inside the board
        Expect("control", call("kanban_show", card_id=neighbour), True,
               '"title": "neighbour"'),
        Expect("control", call("kanban_comment", body="same-board note", card_id=neighbour),
               True, f"commented on #{neighbour}"),
        Expect("control", call("kanban_complete", summary="probed"), True,
               f"card #{probe} is done"),
    ]


def _deep_script() -> list[Expect]:
    return [
        Expect("limits", call("kanban_create", title="grandchild"), False,
               "depth 2 would exceed the limit of 1"),
        Expect("control", call("kanban_complete", summary="deep done"), True, "is done"),
    ]


def _steps(expected: list[Expect]) -> list[dict[str, Any]]:
    return [{"tool_calls": [e.call for e in expected[:-1]]}, {"tool_calls": [expected[-1].call]}]


def _tool_results(db: Path, card_id: int) -> list[str]:
    return [content for (content,) in rows(db, """
        SELECT m.content FROM message m JOIN run r ON r.id = m.run_id
        WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.run_id, m.seq""", card_id)]


def _snapshot_other_board(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "cards": rows(db, "SELECT * FROM card WHERE board = 'other' ORDER BY id"),
        "comments": rows(db, "SELECT * FROM comment WHERE card_id IN "
                             "(SELECT id FROM card WHERE board = 'other') ORDER BY id"),
        "links": rows(db, "SELECT * FROM dependency WHERE card_id IN (SELECT id FROM card "
                          "WHERE board = 'other') OR depends_on_id IN (SELECT id FROM card "
                          "WHERE board = 'other')"),
        "events": rows(db, "SELECT * FROM event WHERE board = 'other' ORDER BY id"),
    }


@pytest.fixture(scope="module")
def probe_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProbeRun]:
    home = tmp_path_factory.mktemp("probe")
    old_umask = os.umask(0)  # private modes must be kanban's own doing
    try:
        yield _run_probes(home)
    finally:
        os.umask(old_umask)


def _run_probes(home: Path) -> ProbeRun:
    path = home / "kanban.db"
    db = open_database(DbLocation(str(path), "flag"), create=True)
    try:
        kb = Kanban(db)
        kb.ensure_board("default")
        kb.ensure_board("other")
        board = BoardFiles(path, kb)
        ids = {"foreign": board.add("foreign", board="other", goal="not yours")}
        ids["hold"] = board.add("hold")
        kb.block(ids["hold"], "a person holds this")
        ids["neighbour"] = board.add("neighbour", depends_on=[ids["hold"]])  # todo: unclaimed
        ids["parent"] = board.add("parent")
        kb.cancel(ids["parent"])
        ids["probe"] = board.add("probe", profile="probe")
        ids["deep"] = board.add("deep", profile="deep", parent_id=ids["parent"])  # depth 1
        expected = {"probe": _probe_script(ids), "deep": _deep_script()}
        board.configure(
            "[limits]\nmax_depth = 1\nmax_children_per_card = 10\n"
            f'[profiles.probe]\nmodel = "{board.script("probe", _steps(expected["probe"]))}"\n'
            f'[profiles.deep]\nmodel = "{board.script("deep", _steps(expected["deep"]))}"\n')
        before = _snapshot_other_board(path)
        kanban(path, "dispatch", "--once", "--board", "default", env=clean_env(home))
        results = {name: _tool_results(path, ids[name]) for name in expected}
        files = [path, home / "kanban.db-wal", home / "kanban.db-shm",
                 *sorted((home / "logs").glob("*.log"))]
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files if p.exists()}
        return ProbeRun(path, ids, expected, results, before, modes)
    finally:
        db.dispose()


def _results_of(run: ProbeRun, name: str, group: str) -> list[tuple[Expect, str]]:
    expected, results = run.expected[name], run.results[name]
    assert len(results) == len(expected), results
    return [(e, got) for e, got in zip(expected, results, strict=True) if e.group == group]


def _check_results(run: ProbeRun, name: str, group: str) -> None:
    for exp, got in _results_of(run, name, group):
        label = f"{exp.call['name']}({exp.call['arguments']}) -> {got[:200]!r}"
        assert exp.says in got, label
        if exp.ok:
            assert "lease" not in got and not got.startswith(("no card", "invalid", "unknown"))
        else:  # an error result is text, never a JSON result of the tool
            assert not got.startswith("{"), label


def test_probes_ran_to_completion(probe_run: ProbeRun) -> None:
    status = dict(rows(probe_run.path, "SELECT id, status FROM card"))
    assert status[probe_run.ids["probe"]] == "done"
    assert status[probe_run.ids["deep"]] == "done"
    _check_results(probe_run, "probe", "control")
    _check_results(probe_run, "deep", "control")


def test_another_boards_cards_are_invisible_and_untouched(probe_run: ProbeRun) -> None:
    _check_results(probe_run, "probe", "board")
    assert _snapshot_other_board(probe_run.path) == probe_run.before


def test_complete_and_block_cannot_name_another_card(probe_run: ProbeRun) -> None:
    _check_results(probe_run, "probe", "card")
    neighbour = probe_run.ids["neighbour"]
    status, result = rows(probe_run.path, "SELECT status, result FROM card WHERE id = ?",
                          neighbour)[0]
    assert (status, result) == ("todo", None)
    comments = rows(probe_run.path, "SELECT author, body FROM comment WHERE card_id = ?",
                    neighbour)
    assert comments == [(f"card:#{probe_run.ids['probe']}", "same-board note")]


def test_tools_outside_the_toolset_are_refused(probe_run: ProbeRun) -> None:
    _check_results(probe_run, "probe", "toolset")


def test_create_is_bounded_by_child_and_depth_limits(probe_run: ProbeRun) -> None:
    _check_results(probe_run, "probe", "limits")
    _check_results(probe_run, "deep", "limits")
    children = rows(probe_run.path, "SELECT board, depth, title FROM card WHERE parent_id = ? "
                                     "ORDER BY id", probe_run.ids["probe"])
    assert children == [("default", 1, f"child {n}") for n in range(10)]
    assert rows(probe_run.path, "SELECT count(*) FROM card WHERE parent_id = ?",
                probe_run.ids["deep"]) == [(0,)]


def test_database_and_logs_are_private_files(probe_run: ProbeRun) -> None:
    names = {"kanban.db", "kanban.db-wal", "kanban.db-shm",
             f"{probe_run.ids['probe']}-1.log", f"{probe_run.ids['deep']}-1.log"}
    assert set(probe_run.modes) == names
    assert set(probe_run.modes.values()) == {"0o600"}, probe_run.modes


def test_an_out_of_range_card_id_is_a_clear_tool_error(probe_run: ProbeRun) -> None:
    _check_results(probe_run, "probe", "range")
    [(_, result)] = _results_of(probe_run, "probe", "range")
    assert "internal error" not in result


def test_workspace_directories_are_private(probe_run: ProbeRun) -> None:
    home = probe_run.path.parent
    dirs = [home / "logs", home / "workspaces", *sorted((home / "workspaces").rglob("*"))]
    modes = {str(p.relative_to(home)): oct(stat.S_IMODE(p.stat().st_mode))
             for p in dirs if p.is_dir()}
    assert set(modes.values()) == {"0o700"}, modes


# --- credentials in worker environments ------------------------------------------------


def _worker_pid(db: Path, card_id: int) -> int | None:
    found = rows(db, "SELECT pid FROM run WHERE card_id = ? AND pid IS NOT NULL", card_id)
    return found[0][0] if found else None


def _leaks(environ: dict[str, str]) -> list[str]:
    return sorted(k for k, v in environ.items() if k in SECRETS or "SECRET" in v)


def test_workers_see_only_the_credentials_their_profile_needs(board: BoardFiles,
                                                              tmp_path: Path) -> None:
    """Cold workers (a fresh interpreter each): the openai worker was given its key (it
    reached the model server), the scripted one none; once read, no key is left in either
    worker's /proc/PID/environ nor in the dispatcher's (issue 28). The warm (forkserver)
    path is checked in test_secrets.py."""
    release = threading.Event()

    def responder(body: dict[str, Any]) -> Any:
        release.wait(30)  # holds the openai worker alive while its environ is read
        return tool_reply(("kanban_complete", {"summary": "done"}))

    with LLMServer(responder=responder) as server:
        base_url = server.openai_base_url
        slow = board.script("slow", slow_steps(1.0, heartbeats=30))
        board.configure(f'[profiles.default]\nmodel = "{slow}"\n'
                        '[profiles.oa]\nmodel = "openai:gpt-4o-mini"\n')
        scripted = board.add("scripted")
        openai = board.add("openai", profile="oa")
        env = clean_env(tmp_path / "home", SECRETS | {"OPENAI_BASE_URL": base_url})
        d = start_dispatcher(board.path, "--cold", "--max-workers", "2", env=env,
                             log=tmp_path / "d.log")
        try:
            pids = {card: wait_until(lambda c=card: _worker_pid(board.path, c), timeout=60,
                                     what=f"a worker for #{card}")
                    for card in (scripted, openai)}
            requests = server.wait_for_requests(1, timeout=30)
            environs = {card: proc_environ(pid) for card, pid in pids.items()}
            dispatcher_env = proc_environ(d.pid)
        finally:
            release.set()
            board.kb.cancel(scripted)
            wait_until(lambda: board.kb.card(openai).status == "done", timeout=60,
                       what="the openai card done")
            code = stop(d)
    assert code == 0
    assert _leaks(dispatcher_env) == []  # overwritten in the dispatcher's block
    assert environs[scripted]["KANBAN_CARD"] == str(scripted)
    assert _leaks(environs[scripted]) == []
    assert requests[0].headers["authorization"] == f"Bearer {SECRETS['OPENAI_API_KEY']}"
    assert environs[openai]["OPENAI_BASE_URL"] == base_url
    assert _leaks(environs[openai]) == []  # read, then overwritten in the worker's block


# --- fencing: a worker that lost its lease writes nothing ------------------------------


TABLES = ("card", "run", "comment", "event", "dependency", "message", "usage")


def _everything(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {table: rows(db, f"SELECT * FROM {table} ORDER BY rowid") for table in TABLES}


def test_stale_claim_token_writes_are_refused_and_change_nothing(board: BoardFiles) -> None:
    kb = board.kb
    card = board.add("contested")
    other = board.add("other card")
    first = kb.claim(1, lease_s=30)[0]
    assert first.card_id == card
    with kb.db.write() as conn:  # a rescuer took the card back: the first lease is gone
        transitions.requeue_or_fail(conn, card, Outcome.LEASE_LOST, "lease expired",
                                    now=kb.clock(), delay_s=0,
                                    actor=Actor("dispatcher:test", first.claim_token))
    lost: list[str] = []
    stale = WorkerScope(kb, "default", card, first.claim_token, first.run_id, lease_s=30,
                        on_lease_lost=lost.append)
    _assert_stale_writes_refused(board, stale, other)  # while the card waits, ready
    second = kb.claim(1, lease_s=30)[0]
    assert (second.card_id, second.attempt) == (card, 2)
    _assert_stale_writes_refused(board, stale, other)  # while another attempt holds it
    kb.complete(card, "the real result", actor=Actor(f"card:#{card}", second.claim_token))
    _assert_stale_writes_refused(board, stale, other)  # after the other attempt finished
    assert kb.card(card).result == "the real result"
    assert len(lost) == 3 * 7  # every fenced write told the worker to stop


def _assert_stale_writes_refused(board: BoardFiles, stale: WorkerScope, other: int) -> None:
    kb, card, token = board.kb, stale.card_id, stale.claim_token
    before = _everything(board.path)
    with pytest.raises(LeaseLost), stale.fenced() as conn:
        comments.add_comment(conn, card, "late", author=stale.actor.name, now=kb.clock())
    with pytest.raises(LeaseLost):
        kb.heartbeat(card, token, run_id=stale.run_id, lease_s=30, note="late")
    with pytest.raises(LeaseLost):
        kb.complete(card, "late result", actor=stale.actor)
    with pytest.raises(LeaseLost):
        kb.block(card, "late", actor=stale.actor)
    with pytest.raises(LeaseLost), kb.db.write() as conn:
        transitions.fail(conn, card, "late failure", now=kb.clock(), actor=stale.actor)
    with pytest.raises(LeaseLost), kb.db.write() as conn:
        transitions.requeue_or_fail(conn, card, Outcome.CRASHED, "late", now=kb.clock(),
                                    actor=stale.actor)
    toolbox = REGISTRY.toolbox(["kanban"], stale)
    for name, args in [("kanban_complete", {"summary": "late"}), ("kanban_block", {"reason": "x"}),
                       ("kanban_heartbeat", {"note": "late"}), ("kanban_comment", {"body": "x"}),
                       ("kanban_create", {"title": "late child"}),
                       ("kanban_link", {"card_id": other, "depends_on_id": card})]:
        result = toolbox.call(ToolCall("c1", name, json.dumps(args)))
        assert result.is_error and f"lease on #{card} was lost" in result.content, name
    assert _everything(board.path) == before


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _write_lock_free(db: Path) -> bool:
    with closing(sqlite3.connect(db, timeout=0.2, isolation_level=None)) as conn:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False
        conn.execute("ROLLBACK")
        return True


def _freeze_outside_a_transaction(pgid: int, db: Path) -> None:
    """SIGSTOP the worker, but never while it holds the write lock (that would stall all)."""
    for _ in range(50):
        os.killpg(pgid, signal.SIGSTOP)
        wait_until(lambda: _state(pgid) == "T", timeout=10, what="the worker stopped")
        if _write_lock_free(db):
            return
        os.killpg(pgid, signal.SIGCONT)
        wait_until(lambda: _write_lock_free(db), timeout=30, what="the write lock released")
    raise AssertionError("could not freeze the worker outside a write transaction")


def test_a_worker_resumed_after_losing_its_lease_writes_nothing(board: BoardFiles,
                                                                tmp_path: Path) -> None:
    spec = board.script("slow", slow_steps(0.2, heartbeats=6))
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')  # lease: the 30 s default
    card = board.add("frozen, then resumed")
    d = start_dispatcher(board.path, "--max-workers", "2", log=tmp_path / "d.log")
    try:
        run1, token1, pid = wait_until(lambda: rows(
            board.path, "SELECT r.id, r.claim_token, r.pid FROM run r WHERE r.card_id = ? AND "
            "r.pid IS NOT NULL AND EXISTS (SELECT 1 FROM message m WHERE m.run_id = r.id)",
            card), timeout=60, what="the first worker under way")[0]
        _freeze_outside_a_transaction(pid, board.path)
        with board.kb.db.write() as conn:  # a rescuer elsewhere decided the lease expired
            transitions.requeue_or_fail(conn, card, Outcome.LEASE_LOST, "lease expired",
                                        now=board.kb.clock(), delay_s=0,
                                        actor=Actor("dispatcher:elsewhere", token1))
        wait_until(lambda: rows(board.path, "SELECT 1 FROM run WHERE card_id = ? AND id != ? "
                                            "AND pid IS NOT NULL", card, run1),
                   timeout=60, what="a second attempt started")
        own = "SELECT (SELECT count(*) FROM message WHERE run_id = :r), (SELECT count(*) " \
              "FROM usage WHERE run_id = :r), (SELECT count(*) FROM event WHERE run_id = :r)"
        frozen = rows(board.path, own.replace(":r", str(run1)))
        os.killpg(pid, signal.SIGCONT)  # the stale worker wakes beside the new attempt
        code = wait_until(lambda: rows(board.path, "SELECT exit_code FROM run WHERE id = ?",
                                       run1)[0][0], timeout=60, what="the stale worker's exit")
        wait_until(lambda: board.kb.card(card).status == "done", timeout=60,
                   what="the card done by the second attempt")
    finally:
        stop(d)
    assert code == 75  # EXIT_LEASE_LOST: it noticed at its first write and stopped
    assert rows(board.path, own.replace(":r", str(run1))) == frozen
    assert rows(board.path, "SELECT outcome FROM run WHERE card_id = ? ORDER BY id", card) == [
        ("lease_lost",), ("completed",)]
    for table in ("message", "usage", "event"):
        late = rows(board.path, f"SELECT t.id FROM {table} t JOIN run r ON r.id = t.run_id "
                                f"WHERE r.id = ? AND t.at > r.finished_at", run1)
        assert late == [], table
    log = (board.home / "logs" / f"{card}-1.log").read_text()
    # Said by whichever noticed first: its next fenced write, or its watch thread.
    assert f"lease on #{card} was lost" in log or \
        f"card #{card} is no longer this worker's" in log, log
