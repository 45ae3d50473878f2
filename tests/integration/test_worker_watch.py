"""The worker's watch thread and hooks on a real database: live activity written without a
write per token, a cancel noticed at once, each turn committed as it completes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kanban.agent import Interrupt, ScriptedModel, TextDelta, run_agent, text, tool_calls
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.tools.catalog import REGISTRY
from kanban.tools.scope import WorkerScope
from kanban.worker.activity import COUNTS_EVERY_S, Activity
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.hooks import WorkerHooks
from tests.support.db import STORES
from tests.support.procs import wait_until


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phase_changes_are_written_at_once_counts_at_most_every_second() -> None:
    ticks = Ticks()
    activity = Activity(max_turns=10, clock=ticks)
    assert activity.take() is not None  # the first state
    activity.model_call(1, "openai:gpt-4o")
    assert activity.urgent.is_set()
    assert activity.take() == {"phase": "model", "turn": 1, "max_turns": 10,
                               "model": "openai:gpt-4o", "tools": [], "tokens": 0, "cost": 0.0}
    for _ in range(1_000):  # a thousand streamed tokens...
        activity.streamed(4)
    assert activity.take() is None  # ...are not worth a write yet
    ticks.now += COUNTS_EVERY_S
    assert activity.take()["tokens"] == 1_000  # type: ignore[index]
    activity.tool_started("terminal")
    activity.tool_started("read_file")
    activity.tool_ended("terminal")
    state = activity.take()
    assert state is not None and state["phase"] == "tools" and state["tools"] == ["read_file"]
    activity.tool_started("\x1b[2Jrm -rf")  # a name streamed by the model
    assert activity.take()["tools"] == ["(unknown tool)", "read_file"]  # type: ignore[index]
    activity.used(5_000, 0.25)
    ticks.now += COUNTS_EVERY_S
    assert activity.take()["cost"] == 0.25  # type: ignore[index]


def claimed(kb: Kanban) -> WorkerScope:
    card = kb.add_card(NewCard(title="watched", board="default"))
    claim = kb.claim(1, lease_s=30)[0]
    assert claim.card_id == card.id
    return WorkerScope(kb, "default", card.id, claim.claim_token, claim.run_id, lease_s=30)


def activity_of(kb: Kanban, run_id: int) -> dict[str, Any]:
    with kb.db.read() as conn:
        raw = conn.scalar("SELECT activity FROM run WHERE id = :id", {"id": run_id})
    return json.loads(raw) if raw else {}


def test_the_watch_stores_activity_and_notices_a_cancel(kb: Kanban) -> None:
    scope = claimed(kb)
    lost: list[str] = []
    scope.on_lease_lost = lost.append
    activity, interrupt = Activity(max_turns=5), Interrupt()
    watch = HeartbeatThread(scope, activity=activity, interrupt=interrupt, check_s=0.02)
    watch.start()
    try:
        activity.tool_started("kanban_show")
        wait_until(lambda: activity_of(kb, scope.run_id).get("tools") == ["kanban_show"],
                   timeout=10, what="the tool on the run row")
        kb.cancel(scope.card_id, reason="changed my mind")
        wait_until(lambda: interrupt.cancelled, timeout=10, what="the interrupt")
        assert lost == [f"card #{scope.card_id} is no longer this worker's"]
        assert interrupt.reason == lost[0]
    finally:
        watch.stop()
    assert not watch.is_alive()


def test_finishing_its_own_card_is_not_a_lost_lease(kb: Kanban) -> None:
    scope = claimed(kb)
    lost: list[str] = []
    scope.on_lease_lost = lost.append
    watch = HeartbeatThread(scope, activity=Activity(max_turns=5), check_s=0.02)
    watch.start()
    complete = REGISTRY.get("kanban_complete")
    complete.handler({"summary": "done"}, scope)
    wait_until(lambda: not watch.is_alive(), timeout=10, what="the watch ending quietly")
    assert lost == [] and scope.finished == "completed"


def test_each_turn_is_committed_before_the_next_call(kb: Kanban) -> None:
    scope = claimed(kb)
    stored: list[int] = []

    def count() -> int:
        with kb.db.read() as conn:
            return int(conn.scalar("SELECT count(*) FROM message WHERE run_id = :id",
                                   {"id": scope.run_id}))

    def second_turn(messages: Any, tools: Any) -> Any:
        stored.append(count())  # what was committed when the model was called again
        return tool_calls([("kanban_complete", {"summary": "all done"})],
                          reasoning="wrapping up")

    model = ScriptedModel([tool_calls([("kanban_show", {}), ("kanban_heartbeat", {})]),
                           second_turn, text("unused")], name="openai:gpt-4o-mini")
    hooks = WorkerHooks(scope, Activity(max_turns=5))
    result = run_agent(model, system="s", prompt="p",
                       toolbox=REGISTRY.toolbox(["kanban"], scope), hooks=hooks)
    assert result.stop_reason == "completed"
    assert stored == [5]  # system, user, the answer and both results
    with kb.db.read() as conn:
        rows = conn.all("SELECT seq, role, model, reasoning, data FROM message "
                        "WHERE run_id = :id ORDER BY seq", {"id": scope.run_id})
        usage = conn.all("SELECT model, cost FROM usage WHERE run_id = :id",
                         {"id": scope.run_id})
    assert [r[0] for r in rows] == list(range(1, 8))
    assert rows[5][1:4] == ("assistant", "openai:gpt-4o-mini", "wrapping up")
    assert len(usage) == 2 and all(cost > 0 for _, cost in usage)  # priced as gpt-4o-mini
    with kb.db.read() as conn:
        total = conn.scalar("SELECT cost FROM card WHERE id = :id", {"id": scope.card_id})
    assert total == sum(cost for _, cost in usage)


def test_the_model_phase_is_stored_with_what_the_model_reads(kb: Kanban) -> None:
    """No watch thread runs here: the first call's commit itself says what runs now."""
    scope = claimed(kb)
    activity = Activity(max_turns=3)
    seen: list[dict[str, Any]] = []

    def first_call(messages: Any, tools: Any) -> Any:
        seen.append(activity_of(kb, scope.run_id))
        return tool_calls([("kanban_complete", {"summary": "done"})])

    model = ScriptedModel([first_call, text("done")], name="openai:gpt-4o-mini")
    run_agent(model, system="s", prompt="p", toolbox=REGISTRY.toolbox(["kanban"], scope),
              hooks=WorkerHooks(scope, activity))
    assert seen[0]["phase"] == "model" and seen[0]["turn"] == 1


def test_streamed_text_only_moves_counters(kb: Kanban) -> None:
    scope = claimed(kb)
    ticks = Ticks()
    activity = Activity(max_turns=3, clock=ticks)
    hooks = WorkerHooks(scope, activity)
    hooks.on_model_start(1, "m")
    activity.take()
    activity.urgent.clear()
    for _ in range(100):
        hooks.on_event(TextDelta("abcd"))
    assert activity.snapshot()["tokens"] == 100
    assert not activity.urgent.is_set() and activity.take() is None


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_cost_rolls_up_over_the_subtree(kb: Kanban) -> None:
    from kanban.queries import subtree_cost

    root = kb.add_card(NewCard(title="root", board="default"))
    child = kb.add_card(NewCard(title="child", board="default", parent_id=root.id))
    grandchild = kb.add_card(NewCard(title="grandchild", board="default", parent_id=child.id))
    other = kb.add_card(NewCard(title="unrelated", board="default"))
    with kb.db.write() as conn:
        for card, dollars in ((root, 0.5), (child, 0.25), (grandchild, 0.125), (other, 9.0)):
            conn.run("UPDATE card SET cost = :c WHERE id = :id", {"c": dollars, "id": card.id})
    with kb.db.read() as conn:
        assert subtree_cost(conn, root.id) == 0.875
        assert subtree_cost(conn, child.id) == 0.375
        assert subtree_cost(conn, 999_999) == 0.0


def test_a_turns_commit_locks_the_card_before_the_run(kb: Kanban,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat renews the card's lease, then the run: a turn's commit (messages, usage,
    the new phase) must take the two rows in that order too, or on PostgreSQL the two
    transactions deadlock and the heartbeat waits out deadlock_timeout (1 s) of its lease."""
    from kanban.state.store import Conn

    updates: dict[int, list[str]] = {}  # per transaction (a Conn each), the tables updated
    kept: list[Conn] = []  # alive, so no later transaction's Conn reuses an id seen here
    execute = Conn.execute

    def record(self: Conn, sql: str, params: Any = None) -> Any:
        words = sql.split()
        if words[:1] == ["UPDATE"] and words[1] in ("card", "run"):
            if id(self) not in updates:
                kept.append(self)
            updates.setdefault(id(self), []).append(words[1])
        return execute(self, sql, params)

    monkeypatch.setattr(Conn, "execute", record)
    scope = claimed(kb)
    model = ScriptedModel([tool_calls([("kanban_show", {})]),
                           tool_calls([("kanban_complete", {"summary": "done"})])],
                          name="openai:gpt-4o-mini")
    run_agent(model, system="s", prompt="p", toolbox=REGISTRY.toolbox(["kanban"], scope),
              hooks=WorkerHooks(scope, Activity(max_turns=5)))
    both = [tables for tables in updates.values() if {"card", "run"} <= set(tables)]
    assert both, "no transaction updated both rows: the test saw nothing"
    for tables in both:
        assert tables.index("run") > max(i for i, t in enumerate(tables) if t == "card"), \
            tables


def test_a_turn_whose_commit_was_in_doubt_is_stored_once(kb: Kanban,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The server lost during a turn's COMMIT (the write may or may not have landed): the
    worker tries again, finds the turn stored, and goes on, instead of exiting."""
    from contextlib import contextmanager

    from kanban.state.errors import TransientDatabaseError

    scope = claimed(kb)
    write = type(kb.db).write
    lost = {"left": 1}

    @contextmanager
    def commit_then_lose(db: Any) -> Any:
        with write(db) as conn:
            yield conn
        if lost["left"]:  # committed, and then the answer to COMMIT never came
            lost["left"] -= 1
            raise TransientDatabaseError("server closed the connection during COMMIT",
                                         in_doubt=True)

    hooks = WorkerHooks(scope, Activity(max_turns=5))
    monkeypatch.setattr(type(kb.db), "write", commit_then_lose)
    model = ScriptedModel([tool_calls([("kanban_complete", {"summary": "done"})])],
                          name="openai:gpt-4o-mini")
    result = run_agent(model, system="s", prompt="p",
                       toolbox=REGISTRY.toolbox(["kanban"], scope), hooks=hooks)
    monkeypatch.undo()
    assert lost["left"] == 0 and result.stop_reason == "completed"
    with kb.db.read() as conn:
        seqs = conn.column("SELECT seq FROM message WHERE run_id = :id ORDER BY seq",
                           {"id": scope.run_id})
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 3  # each once, in order


def test_the_kanban_tools_write_through_a_short_outage(kb: Kanban,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every kanban_* write is tried again while the database is away (as the worker's
    own writes are), instead of handing the model a database error it cannot fix."""
    from contextlib import contextmanager

    from kanban.agent.types import ToolCall
    from kanban.state.errors import TransientDatabaseError

    scope = claimed(kb)
    other = kb.add_card(NewCard("another card"))
    write = type(kb.db).write
    refusals = {"left": 0}

    @contextmanager
    def away_once(db: Any) -> Any:
        if refusals["left"]:  # the write never began: nothing is in doubt
            refusals["left"] -= 1
            raise TransientDatabaseError("database is locked")
        with write(db) as conn:
            yield conn

    monkeypatch.setattr(type(kb.db), "write", away_once)
    toolbox = REGISTRY.toolbox(["kanban"], scope)
    results = []
    for name, args in (("kanban_heartbeat", {"note": "half way"}),
                       ("kanban_comment", {"body": "a note"}),
                       ("kanban_create", {"title": "a sub-card"}),
                       ("kanban_link", {"card_id": other.id, "depends_on_id": scope.card_id}),
                       ("kanban_complete", {"summary": "done"})):
        refusals["left"] = 1
        results.append(toolbox.call(ToolCall(name, name, json.dumps(args))))
        assert refusals["left"] == 0, name  # the outage was met, and waited out
    monkeypatch.undo()
    assert [r.is_error for r in results] == [False] * 5, [r.content for r in results]
    detail = kb.detail(scope.card_id)
    assert [c.body for c in detail.comments] == ["a note"]
    assert [c.title for c in detail.children] == ["a sub-card"]
    assert [d.id for d in kb.detail(other.id).depends_on] == [scope.card_id]
    assert detail.card.status == "done"
