"""Triage through the real CLI, dispatcher and workers: a scripted decomposer splits a rough
idea into a graph with a dependency, the children run, and the idea ends with their results;
`--dry-run` prints the graph and creates nothing."""

from __future__ import annotations

import json

from tests.acceptance.conftest import BoardFiles
from tests.acceptance.test_review import status, worker_env
from tests.support.procs import counts, kanban, query, start_dispatcher, stop, wait_until

GRAPH = [
    {"title": "gather the facts", "goal": "list the product's features",
     "profile": "researcher"},
    {"title": "write the announcement", "goal": "a short post from the facts",
     "profile": "writer", "depends_on": [1]},
]


def configure(board: BoardFiles) -> None:
    planner = board.script("planner", [
        {"tool_calls": [{"name": "kanban_decompose", "arguments": {"cards": GRAPH}}]},
    ])
    board.configure(f"""
[profiles.planner]
model = "{planner}"
role = "decomposer"
description = "Splits rough ideas into cards"

[profiles.researcher]
model = "scripted:demo"
description = "Finds facts"

[profiles.writer]
model = "scripted:demo"
description = "Writes short texts"
""")


def test_a_triaged_idea_becomes_a_graph_and_ends_with_its_results(board: BoardFiles) -> None:
    configure(board)
    idea = int(kanban(board.path, "add", "--triage", "launch the product").stdout.strip()[1:])
    assert status(board, idea) == "triage"
    proc = start_dispatcher(board.path, env=worker_env(), log=board.home / "dispatch.log")
    try:
        wait_until(lambda: status(board, idea) == "done", timeout=90, what="the idea done")
    finally:
        stop(proc)
    cards = query(board.path, "SELECT id, title, profile, role, status FROM card "
                              "WHERE parent_id = ? ORDER BY id", idea)
    (decomposer, facts, post) = cards
    assert decomposer[2:] == ("planner", "decomposer", "done")
    assert facts[1:] == ("gather the facts", "researcher", "leaf", "done")
    assert post[1:] == ("write the announcement", "writer", "leaf", "done")
    assert query(board.path, "SELECT depends_on_id FROM dependency WHERE card_id = ?",
                 post[0]) == [(facts[0],)]
    assert query(board.path, "SELECT depends_on_id FROM dependency WHERE card_id = ?",
                 idea) == []  # it waited on its children in `waiting`, not on dependencies
    # the writer started only after the facts were done
    facts_done = query(board.path, "SELECT finished_at FROM card WHERE id = ?", facts[0])[0][0]
    post_started = query(board.path, "SELECT min(started_at) FROM run WHERE card_id = ?",
                         post[0])[0][0]
    assert post_started >= facts_done
    result, role = query(board.path, "SELECT result, role FROM card WHERE id = ?", idea)[0]
    assert role == "triaged"
    assert result.startswith("Done through 2 cards:")
    assert f"#{facts[0]} gather the facts (done)" in result
    assert f"#{post[0]} write the announcement (done)" in result
    kinds = [k for (k,) in query(board.path, "SELECT kind FROM event WHERE card_id = ? "
                                              "ORDER BY id", idea)]
    assert kinds[0] == "created" and kinds.index("decomposed") < kinds.index("resumed")
    assert kinds[-1] == "complete"


def test_dry_run_prints_the_graph_and_creates_nothing(board: BoardFiles) -> None:
    configure(board)
    shown = kanban(board.path, "add", "--triage", "launch the product", "--dry-run")
    assert shown.stdout.splitlines() == [
        "1. [researcher] gather the facts", "   goal: list the product's features",
        "2. [writer] write the announcement after 1", "   goal: a short post from the facts"]
    assert "nothing was created" in shown.stderr
    assert counts(board.path) == {}
    existing = board.add("launch the product")
    as_json = json.loads(kanban(board.path, "triage", str(existing), "--dry-run",
                                "--json").stdout)
    assert as_json["dry_run"] is True and as_json["decomposer"] == "planner"
    assert [c["depends_on"] for c in as_json["cards"]] == [[], [1]]
    assert counts(board.path) == {"ready": 1}
    assert query(board.path, "SELECT count(*) FROM event WHERE card_id != ?", existing) == [
        (0,)]


def test_triage_errors_are_one_line(board: BoardFiles) -> None:
    no_decomposer = kanban(board.path, "add", "--triage", "x", check=False)
    assert no_decomposer.returncode == 1
    assert "no decomposer profile" in no_decomposer.stderr
    assert "Traceback" not in no_decomposer.stderr
    configure(board)
    verify = kanban(board.path, "add", "--triage", "x", "--verify", "true", check=False)
    assert verify.returncode == 1 and "children" in verify.stderr
    stray = kanban(board.path, "add", "x", "--dry-run", check=False)
    assert stray.returncode == 2 and "--triage" in stray.stderr
    assert counts(board.path) == {}
