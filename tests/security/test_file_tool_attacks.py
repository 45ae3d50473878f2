"""Attacks through the file tools (read_file, write_file, edit_file, list_files,
search_files), which run in the worker, outside the sandbox: the board's folder, the
dispatcher's HOME and /root, symlinks planted by a command, a folder swapped for a symlink
while the tools run, and hard links to files outside."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import Attack, Call, Canaries
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.procs import kanban, query

TOOLS = """toolsets = ["kanban", "file", "terminal"]
approval = "allow"
max_turns = 400
token_budget = 50000000
context_window = 10000000"""
SWAP_ROUNDS = 60  # turns of tool calls through the swapped folder, four or five calls each


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose board lives in its own `.kanban/` (README: `--workspace dir:.`)."""
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "app.py").write_text("print('hello')\n")
    return folder


def errors(seen: list[str]) -> list[bool]:
    return [result.startswith("Error:") for result in seen]


def test_a_dir_workspace_holding_the_board_cannot_reach_it(
        project_attack: Attack, project: Path) -> None:
    attack = project_attack
    attack.configure(TOOLS)
    config = attack.board.home / "config.toml"
    before = config.read_bytes()
    turn_off = '[profiles.attacker]\nsandbox = "off"'
    card, seen = attack.run([
        ("read_file", {"path": ".kanban/config.toml"}),
        ("edit_file", {"path": ".kanban/config.toml", "old": "[profiles.attacker]",
                       "new": turn_off}),
        ("write_file", {"path": ".kanban/config.toml",
                        "content": before.decode() + 'sandbox = "off"\n'}),
        ("write_file", {"path": "src/../.kanban/logs/planted.log", "content": "x"}),
        ("list_files", {"path": ".kanban"}),
        ("read_file", {"path": ".kanban/kanban.db"}),
        ("terminal", {"command": "ln -s .kanban board && ln -s ../.kanban src/up"}),
        ("edit_file", {"path": "board/config.toml", "old": "[profiles.attacker]",
                       "new": turn_off}),
        ("read_file", {"path": "src/up/config.toml"}),
        ("list_files", {"path": "board"}),
        # the workspace root: listed and searched, the board's folder never shown
        ("list_files", {}),
        ("list_files", {"pattern": "*"}),
        ("search_files", {"regex": "profiles|attacker|sandbox"}),
    ], workspace=f"dir:{project}")
    assert attack.card(card)[0] == "done"
    assert errors(seen) == [True] * 6 + [False] + [True] * 3 + [False] * 3
    assert config.read_bytes() == before
    assert not (attack.board.home / "logs" / "planted.log").exists()
    assert seen[12].startswith("no matches")
    for listing in seen[10:12]:  # the links are listed (never followed), the board is not
        for line in listing.splitlines():
            assert not line.startswith(".kanban") and "config.toml" not in line
            assert "kanban.db" not in line and "logs" not in line
    # the next card of the profile runs with the profile as it was
    second, _ = attack.run([("terminal", {"command": "true"})], title="next",
                           workspace=f"dir:{project}")
    (data,) = query(attack.board.path,
                    "SELECT data FROM event WHERE card_id = ? AND kind = 'sandbox'", second)[0]
    assert 'sandbox = \\"off\\"' not in data and "unsandboxed" not in data
    attack.assert_contained()


def test_home_canaries_and_root_are_out_of_reach(attack: Attack, canaries: Canaries) -> None:
    attack.configure(TOOLS)
    home = canaries.home
    climb = "../../../dispatcher-home"  # from workspaces/default/<card> of the board's folder
    calls: list[Call] = [
        ("read_file", {"path": str(canaries.secret_file)}),
        ("read_file", {"path": f"{climb}/.ssh/id_canary"}),
        ("list_files", {"path": climb}),
        ("read_file", {"path": "/root/.bashrc"}),
        ("list_files", {"path": "../../../../../../../../../../root"}),
        ("terminal", {"command": f"ln -s {canaries.secret_file} key; ln -s {home} home; "
                                 "ln -s /root root; ln -s ../../.. board"}),
        ("read_file", {"path": "key"}),
        ("read_file", {"path": "home/.netrc"}),
        ("list_files", {"path": "home"}),
        ("search_files", {"regex": "canary", "path": "home"}),
        ("write_file", {"path": "home/planted.txt", "content": "x"}),
        ("write_file", {"path": "key", "content": "overwritten"}),
        ("list_files", {"path": "root"}),
        ("read_file", {"path": "board/config.toml"}),
        ("search_files", {"regex": "canary"}),
        ("list_files", {"pattern": "*"}),
        # the folders where cut outputs are saved, made links out by a command
        ("write_file", {"path": "long.txt", "content": "row\n" * 20_000}),
        ("terminal", {"command": f"ln -s {home}/.ssh .tool-outputs; "
                                 f"ln -s {home} .kanban-outputs"}),
        ("read_saved_output", {"path": "id_canary"}),
        ("terminal", {"command": "seq 1 200000"}),
        ("read_file", {"path": "long.txt", "limit": 5000}),
    ]
    card = attack.board.add("attack", profile=attack.profile)
    seen = replay_rounds(attack, card, [[call] for call in calls])
    assert attack.card(card)[0] == "done"
    assert errors(seen[:5]) == [True] * 5
    assert errors(seen[6:14]) == [True] * 8
    assert "no matches" in seen[14]
    assert "home -> " in seen[15]  # listed, never followed
    assert not any(line.startswith(("home/", "root/")) for line in seen[15].splitlines())
    assert errors(seen[16:19]) == [False, False, True]
    assert "nowhere" in seen[19] and "nowhere" in seen[20]
    assert sorted(p.name for p in home.iterdir()) == [".netrc", ".ssh"]
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == ["id_canary"]
    assert canaries.secret_file.read_text() == canaries.file_secret + "\n"
    attack.assert_contained()


FLIPPER = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = (os.fsencode(p) for p in sys.argv[1:3])
flips = 0
def stop(*_):
    print(flips, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
while True:  # renameat2(RENAME_EXCHANGE): both names always exist, swapped atomically
    if libc.renameat2(-100, a, -100, b, 2) == 0:
        flips += 1
"""


class Flipper:
    """The attacker's racing card: a process exchanging two names in a loop until
    stopped; `flips` is how many exchanges it made."""

    def __init__(self, a: Path, b: Path) -> None:
        self.args = [sys.executable, "-c", FLIPPER, str(a), str(b)]
        self.flips = 0

    def __enter__(self) -> Flipper:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"
        return self

    def __exit__(self, *_: object) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=30)
        self.flips = int(out.strip() or 0)


def replay_rounds(attack: Attack, card: int, rounds: list[list[Call]]) -> list[str]:
    """Dispatch once with a model making each round's calls in one turn (the readers run
    side by side), then completing; every tool result it was shown, in order (counted per
    turn: the conversation it is sent may be compacted)."""
    seen: list[str] = []
    turn = itertools.count()

    def respond(body: dict[str, Any]) -> Reply:
        if not body.get("tools"):  # a summary of the middle of the conversation
            return text_reply("the attack so far")
        n = next(turn)
        if 0 < n <= len(rounds):
            seen.extend(tool_results(body)[-len(rounds[n - 1]):])
        if n < len(rounds):
            return tool_reply(*rounds[n])
        if n == len(rounds):
            return tool_reply(("kanban_complete", {"summary": "attack over"}))
        return text_reply("done")

    with LLMServer(responder=respond) as server:
        kanban(attack.board.path, "dispatch", "--once", env=attack.canaries.env(server),
               check=False)
    return seen


def swap_rounds(rounds: int) -> list[list[Call]]:
    calls: list[list[Call]] = []
    for n in range(rounds):
        calls += [[("write_file", {"path": f"d/new-{n}.txt", "content": "planted"}),
                  ("read_file", {"path": "d/id_canary"}),
                  ("edit_file", {"path": "d/id_canary", "old": "harmless",
                                 "new": "harmless"}),
                  ("list_files", {"path": "d"}),
                  ("search_files", {"regex": "canary", "path": "d"})]]
    return calls


def test_a_folder_swapped_for_a_symlink_while_the_tools_run(
        attack: Attack, canaries: Canaries, tmp_path: Path) -> None:
    attack.configure(TOOLS.replace('"terminal"', "").replace(", ]", "]"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_canary").write_text(canaries.file_secret)  # the scan skips this name
    card = attack.board.add("swap", profile=attack.profile)
    workspace = attack.workspace(card)
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "id_canary").write_text("a harmless file of the card\n")
    (workspace / "link").symlink_to(outside)  # what the racing card swaps in for `d`
    with Flipper(workspace / "d", workspace / "link") as swapper:
        seen = replay_rounds(attack, card, swap_rounds(SWAP_ROUNDS))
    assert swapper.flips > 100  # the race really ran
    assert attack.card(card) == ("done", None), attack.card(card)[1]
    assert sorted(p.name for p in outside.iterdir()) == ["id_canary"]
    assert (outside / "id_canary").read_text() == canaries.file_secret
    assert not any(canaries.file_secret in result for result in seen)
    attack.assert_contained()


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written(
        attack: Attack, canaries: Canaries, tmp_path: Path) -> None:
    attack.configure(TOOLS.replace('"terminal"', "").replace(", ]", "]"))
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "id_canary"
    secret.write_text(canaries.file_secret)
    card = attack.board.add("link", profile=attack.profile)
    workspace = attack.workspace(card)
    for folder in ("d", "e", "f"):
        (workspace / folder).mkdir(parents=True)
    # links made while the model could reach the file (an unsandboxed card, say)
    os.link(secret, workspace / "e" / "id_canary")
    os.link(secret, workspace / "f" / "id_canary")
    (workspace / "d" / "id_canary").write_text("a harmless file of the card\n")
    rounds: list[list[Call]] = [[("read_file", {"path": "f/id_canary"})],
                                [("edit_file", {"path": "f/id_canary", "old": "canary",
                                                "new": "changed"})],
                                [("write_file", {"path": "f/id_canary", "content": "changed"})]]
    for n in range(SWAP_ROUNDS):  # `d/id_canary` is now the card's file, now the link
        rounds.append([("read_file", {"path": "d/id_canary"}),
                       ("edit_file", {"path": "d/id_canary", "old": "canary",
                                      "new": "changed"}),
                       ("write_file", {"path": "d/id_canary", "content": f"changed {n}"}),
                       ("search_files", {"regex": "canary", "path": "d"})])
    with Flipper(workspace / "d" / "id_canary", workspace / "e" / "id_canary") as linker:
        seen = replay_rounds(attack, card, rounds)
    assert linker.flips > 100
    assert attack.card(card) == ("done", None), attack.card(card)[1]
    assert errors(seen[:3]) == [True, True, False], seen[:3]
    assert (workspace / "f" / "id_canary").read_text() == "changed"  # the name, not the file
    assert secret.read_text() == canaries.file_secret
    assert not any(canaries.file_secret in result for result in seen)
    attack.assert_contained()


BIND_PROBE = """
import json, sys
from pathlib import Path
from kanban.agent.types import ToolCall
from kanban.tools.catalog import REGISTRY
from kanban.tools.workbench import Workbench
bench = Workbench(workspace=Path(sys.argv[1]), hidden=(Path(sys.argv[2]),))
box = REGISTRY.toolbox(["file"], contexts={"file": bench})
for name, args in json.loads(sys.argv[3]):
    result = box.call(ToolCall("c", name, json.dumps(args)))
    print(json.dumps([result.is_error, result.content]))
"""


def test_the_board_bound_into_the_workspace_is_still_the_board(
        sandboxed: None, tmp_path: Path) -> None:
    """A bind mount has no symlink to see: the folder is known by its device and inode."""
    board = tmp_path / "board"
    board.mkdir()
    (board / "config.toml").write_text("[profiles.secret]\n")
    workspace = tmp_path / "ws"
    (workspace / "mnt").mkdir(parents=True)
    calls = [("read_file", {"path": "mnt/config.toml"}), ("list_files", {}),
             ("search_files", {"regex": "secret"}),
             ("write_file", {"path": "mnt/config.toml", "content": "x"})]
    out = subprocess.run(
        ["bwrap", "--dev-bind", "/", "/", "--bind", str(board), str(workspace / "mnt"),
         sys.executable, "-c", BIND_PROBE, str(workspace), str(board), json.dumps(calls)],
        capture_output=True, text=True, timeout=60, check=True).stdout
    results = [json.loads(line) for line in out.splitlines()]
    assert [error for error, _ in results] == [True, False, False, True]
    assert "board's folder" in results[0][1] and "board's folder" in results[3][1]
    assert results[1][1] == ".: nothing" and results[2][1].startswith("no matches")
    assert (board / "config.toml").read_text() == "[profiles.secret]\n"


@pytest.mark.parametrize("where", [".", "workspaces/default", "logs"])
def test_a_dir_workspace_in_the_board_folder_is_refused(attack: Attack, where: str) -> None:
    """The board's folder is hidden inside a workspace; it cannot be the workspace."""
    attack.configure(TOOLS)
    config = attack.board.home / "config.toml"
    before = config.read_bytes()
    (attack.board.home / where).mkdir(parents=True, exist_ok=True)
    card, seen = attack.run([("edit_file", {"path": "config.toml", "old": "[profiles.attacker]",
                                            "new": '[profiles.attacker]\nsandbox = "off"'})],
                            workspace=f"dir:{attack.board.home / where}")
    status, error = attack.card(card)
    assert status == "failed" and "board's folder" in (error or "")
    assert seen == [] and config.read_bytes() == before
