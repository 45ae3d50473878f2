"""Durable delegation through real processes: orchestrators wait without holding a worker."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, Reply, called_tools, text_reply, tool_reply
from tests.support.llm_server import tool_results as results_in
from tests.support.procs import (
    KANBAN,
    counts,
    kanban,
    query,
    start_dispatcher,
    stop,
    wait_until,
)

_TITLE = re.compile(r"Your card is #\d+: ([A-Za-z0-9-]+)")


def _offered(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def _title(body: dict[str, Any]) -> str | None:
    found = _TITLE.search(json.dumps(body))
    return found.group(1) if found else None


def _tree_model(body: dict[str, Any]) -> Reply:
    """The lead and every orchestrator delegate two tasks; level-3 cards are leaves.

    The lead has only `delegate`; a card titled L1-x or L2-x is an orchestrator; L3-x a leaf.
    Each answers with its children's summaries, so the lead's answer names all eight leaves.
    """
    tools, called, title = _offered(body), called_tools(body), _title(body)
    if "kanban_complete" in called:
        return text_reply("finished")
    if "delegate" in tools and "delegate" not in called:
        level = 1 if title is None else int(title[1]) + 1
        name = "L1" if title is None else f"L{level}-{title.partition('-')[2]}"
        role = {"role": "orchestrator"} if level < 3 else {}
        tasks = [{"title": f"{name}{suffix}" if title else f"L1-{suffix}",
                  "goal": "do your part", **role} for suffix in "ab"]
        return tool_reply(("delegate", {"tasks": tasks}))
    if "delegate" in called:
        children = json.loads(results_in(body)[-1])["children"]
        summaries = " ".join(str(c.get("summary")) for c in children)
        if title is None:
            return text_reply(f"ANSWER: {summaries}")
        return tool_reply(("kanban_complete", {"summary": f"[{summaries}]"}))
    return tool_reply(("kanban_complete", {"summary": f"{title}-done"}))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_deep_tree_completes_with_one_worker(board: BoardFiles, provider: str) -> None:
    board.configure("[limits]\nmax_workers = 1\nmax_depth = 3\n")
    with LLMServer(responder=_tree_model) as server:
        env = {**os.environ, **server.env()}
        out = kanban(board.path, "run", "Build the tree", "--model", f"{provider}:test-model",
                     env=env).stdout
    cards = query(board.path, "SELECT id, title, status, depth, role FROM card ORDER BY id")
    assert len(cards) == 15 and {c[2] for c in cards} == {"done"}
    assert sorted(c[3] for c in cards) == [0] + [1] * 2 + [2] * 4 + [3] * 8
    leaves = sorted(c[1] for c in cards if c[3] == 3)
    assert leaves == sorted(f"L3-{a}{b}{c}" for a in "ab" for b in "ab" for c in "ab")
    for leaf in leaves:
        assert f"{leaf}-done" in out  # every leaf's summary reached the lead's answer
    orchestrators = [c[0] for c in cards if c[3] in (1, 2)]
    assert all(c[4] == "orchestrator" for c in cards if c[3] in (1, 2))
    for card_id in orchestrators:  # each ran twice: delegated (and exited), then resumed
        outcomes = [r[0] for r in query(board.path, "SELECT outcome FROM run WHERE card_id = ? "
                                                    "ORDER BY id", card_id)]
        assert outcomes == ["waiting", "completed"], (card_id, outcomes)
    # One worker at a time, and never one that waits: the runs in workers never overlap.
    runs = query(board.path, "SELECT r.started_at, r.finished_at FROM run r JOIN card c "
                             "ON c.id = r.card_id WHERE c.depth > 0 ORDER BY r.started_at")
    assert len(runs) == 14 + 6
    for (_, finished), (started, _) in zip(runs, runs[1:], strict=False):
        assert finished <= started


def test_a_killed_worker_resumes_from_its_last_committed_turn(board: BoardFiles) -> None:
    """Ten steps, SIGKILL while the model is asked for one of them: the retry asks for that
    step again and for no earlier one."""
    kill_at = random.randint(2, 10)
    held, asked = threading.Event(), []

    def model(body: dict[str, Any]) -> Reply:
        step = len(results_in(body)) + 1
        asked.append(step)
        if step == kill_at and asked.count(step) == 1:
            held.wait(60)  # the worker is killed while it waits for this answer
        if step <= 10:
            return tool_reply(("kanban_heartbeat", {"note": f"step {step}"}))
        return tool_reply(("kanban_complete", {"summary": "ten steps done"}))

    board.configure('[profiles.steps]\nmodel = "openai:test-model"\n')
    with LLMServer(responder=model) as server:
        env = {**os.environ, **server.env()}
        card = kanban(board.path, "add", "ten steps", "--profile", "steps", "--json",
                      env=env).stdout
        card_id = json.loads(card)["id"]
        dispatcher = start_dispatcher(board.path, "--max-workers", "1", env=env)
        try:
            wait_until(lambda: asked.count(kill_at) == 1, timeout=60,
                       what=f"the model asked for step {kill_at}")
            pid = wait_until(lambda: query(board.path, "SELECT pid FROM run WHERE card_id = ? "
                                                       "AND finished_at IS NULL AND pid IS NOT "
                                                       "NULL", card_id), timeout=60,
                             what="the worker's pid recorded")[0][0]
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: counts(board.path).get("done"), timeout=60,
                       what="the retried card to finish")
        finally:
            held.set()
            stop(dispatcher)
    expected = [*range(1, kill_at + 1), *range(kill_at, 12)]
    assert asked == expected, f"killed at step {kill_at}"
    outcomes = query(board.path, "SELECT outcome FROM run WHERE card_id = ? ORDER BY id",
                     card_id)
    assert [o for (o,) in outcomes] == ["crashed", "completed"]
    assert query(board.path, "SELECT result FROM card WHERE id = ?", card_id) == [
        ("ten steps done",)]


def test_a_spent_tree_budget_stops_new_children(board: BoardFiles) -> None:
    """The lead's tree may use 500 tokens: its first child spends 600, so the second child
    does not start and a second delegation is refused, each with a clear result."""

    def model(body: dict[str, Any]) -> Reply:
        title, called = _title(body), called_tools(body)
        if title is None:  # the lead
            if called.count("delegate") == 0:
                return tool_reply(("delegate", {"tasks": [
                    {"title": "first", "goal": "spend"},
                    {"title": "second", "goal": "spend", "after": [0]}]}), usage=(100, 10, 0))
            if called.count("delegate") == 1:
                return tool_reply(("delegate", {"tasks": [{"title": "third", "goal": "g"}]}),
                                  usage=(100, 10, 0))
            return text_reply("ANSWER: " + " | ".join(results_in(body)), usage=(100, 10, 0))
        assert title == "first", f"{title} must not start"
        return tool_reply(("kanban_complete", {"summary": "spent a lot"}), usage=(550, 50, 0))

    board.configure("[limits]\nmax_workers = 1\n[profiles.lead]\ntree_token_budget = 500\n")
    with LLMServer(responder=model) as server:
        env = {**os.environ, **server.env()}
        done = kanban(board.path, "run", "Spend it", "--model", "openai:test-model",
                      env=env, check=False)
        out = done.stdout
    assert done.returncode == 5  # a budget stopped a card (kanban/cli/exit_codes.py)
    cards = query(board.path, "SELECT id, title, status, error FROM card ORDER BY id")
    assert [(c[1], c[2]) for c in cards] == [("Spend it", "done"), ("first", "done"),
                                             ("second", "failed")]
    lead = cards[0][0]
    spent = f"the token budget of #{lead}'s tree is spent"
    # the lead's first call (110 tokens) and the first child's (600)
    assert cards[2][3] == f"not started: {spent} (710 of 500 tokens over 3 cards)"
    # …and the lead's second call
    assert (f"{spent} (820 of 500 tokens over 3 cards); no cards were created: finish with "
            "what you have") in out
    assert "tree: 3 cards · 4 turns · 930 tokens" in kanban(board.path, "show", str(lead)).stdout
    totals = json.loads(kanban(board.path, "show", str(lead), "--json").stdout)["tree"]
    assert (totals["cards"], totals["turns"], totals["tokens"]) == (3, 4, 930)


def test_ctrl_c_then_resume_gives_the_uninterrupted_answer(board: BoardFiles) -> None:
    release = threading.Event()
    release.set()

    def model(body: dict[str, Any]) -> Reply:
        title, called = _title(body), called_tools(body)
        if title is None:  # the lead
            if "delegate" not in called:
                return tool_reply(("delegate", {"tasks": [{"title": "alpha", "goal": "a"},
                                                          {"title": "beta", "goal": "b"}]}))
            children = json.loads(results_in(body)[-1])["children"]
            return text_reply("ANSWER: " + "; ".join(str(c.get("summary")) for c in children))
        if "kanban_complete" in called:
            return text_reply("finished")
        release.wait(60)  # while it is clear the children are stuck
        return tool_reply(("kanban_complete", {"summary": f"{title} done"}))

    with LLMServer(responder=model) as server:
        env = {**os.environ, **server.env()}
        args = ("run", "Two parts", "--model", "openai:test-model")
        uninterrupted = kanban(board.path, *args, env=env).stdout
        assert uninterrupted.startswith("ANSWER: alpha done; beta done")
        release.clear()
        # A suite started in the background inherits SIGINT ignored; this one must feel it.
        proc = subprocess.Popen([*KANBAN, "--db", str(board.path), *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            wait_until(lambda: query(board.path, "SELECT count(*) FROM card WHERE status = "
                                                 "'running' AND parent_id IS NOT NULL")[0][0],
                       timeout=60, what="a child running")
            lead = query(board.path, "SELECT max(id) FROM card WHERE created_by = 'lead'")[0][0]
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130 and b"Traceback" not in err, err
        assert f"kanban run --resume {lead}".encode() in err
        assert query(board.path, "SELECT status FROM card WHERE id = ?", lead) == [("waiting",)]
        kids = query(board.path, "SELECT status FROM card WHERE parent_id = ?", lead)
        assert {s for (s,) in kids} <= {"ready", "done"}  # handed back, never cancelled
        resumed = kanban(board.path, "run", "--resume", str(lead), env=env).stdout
    assert resumed == uninterrupted
    assert query(board.path, "SELECT status FROM card WHERE id = ?", lead) == [("done",)]


def test_a_detached_lead_runs_in_a_worker_and_can_be_attached(board: BoardFiles) -> None:
    lead = int(kanban(board.path, "run", "Compare journal modes", "--detach", "-q").stdout)
    assert query(board.path, "SELECT status, role FROM card WHERE id = ?", lead) == [
        ("ready", "orchestrator")]
    gone = kanban(board.path, "run", "--attach", str(lead), check=False)
    assert gone.returncode == 1
    assert gone.stderr == f"kanban: error: #{lead} is ready and no live dispatcher serves board " \
                         "'default'\n"
    dispatcher = start_dispatcher(board.path, "--max-workers", "2")
    try:
        wait_until(lambda: json.loads(kanban(board.path, "status", "--json").stdout)[
            "dispatchers"], timeout=60, what="the dispatcher registered")
        answer = kanban(board.path, "run", "--attach", str(lead), "-q").stdout
    finally:
        stop(dispatcher)
    assert answer.startswith("Answer for: Compare journal modes")
    outcomes = [o for (o,) in query(board.path, "SELECT outcome FROM run WHERE card_id = ? "
                                                "ORDER BY id", lead)]
    assert outcomes == ["waiting", "completed"]  # no process waited for the children
    assert query(board.path, "SELECT count(*) FROM card WHERE parent_id = ?", lead) == [(3,)]
