"""Terminal commands in bubblewrap, through a real dispatcher, worker and SDK client: they
see no credential and no other process, cannot write outside their workspace, and reach a
loopback server only when the profile has a network."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.procs import kanban, query, start_dispatcher, stop, wait_until
from tests.support.sandbox import (
    REACHED,
    loopback_server,
    require_bwrap,
    require_own_network,
)

MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"
SECRET = "sk-sandbox-" + uuid.uuid4().hex  # the model key the dispatcher is given
FETCH = ("python3 -c 'import urllib.request as u; "
         "print(u.urlopen(\"{url}\", timeout=3).read().decode())'")


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_bwrap()


def configure(board: BoardFiles, *, network: bool, reach_host: bool = False) -> None:
    board.configure(f"""
[profiles.worker]
model = "openai:test-model"
toolsets = ["kanban", "terminal"]
approval = "allow"
network = {str(network).lower()}
reach_host = {str(reach_host).lower()}
sandbox = "required"
""")


def scripted(commands: list[str], seen: list[str]):  # type: ignore[no-untyped-def]
    """One terminal call per command, then complete; `seen` gets the raw results."""

    def respond(body: dict[str, Any]) -> Reply:
        results = tool_results(body)
        if len(results) < len(commands):
            return tool_reply(("terminal", {"command": commands[len(results)]}))
        if len(results) == len(commands):
            seen[:] = results
            return tool_reply(("kanban_complete", {"summary": "probed"}))
        return text_reply("done")

    return respond


def run_card(board: BoardFiles, commands: list[str]) -> tuple[int, list[str]]:
    card = board.add("probe the sandbox", profile="worker")
    seen: list[str] = []
    with LLMServer(responder=scripted(commands, seen)) as server:
        env = {**os.environ, **server.env(), "OPENAI_API_KEY": SECRET}
        kanban(board.path, "dispatch", "--once", env=env)
    status, error = query(board.path, "SELECT status, error FROM card WHERE id = ?", card)[0]
    assert status == "done", error
    assert len(seen) == len(commands)
    return card, seen


def test_a_command_sees_no_credential_no_process_and_writes_only_its_workspace(
        board: BoardFiles, tmp_path: Path) -> None:
    configure(board, network=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    private = f"/tmp/kanban-sandbox-{uuid.uuid4().hex}"
    hidden = board.home / "note-in-the-hidden-home"
    card, seen = run_card(board, [
        "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; echo PROCS:; "
        "ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '",
        f"echo x > {outside}/escape.txt; echo y > /etc/kanban-sandbox-probe; "
        f"echo z > {private} && echo PRIVATE-TMP-OK; echo HOME:; ls -A {board.home}; "
        f"echo w > {hidden}; "
        "touch inside.txt && echo INSIDE-OK",
    ])
    environment, writes = seen
    assert SECRET not in environment and "KANBAN_CLAIM_TOKEN" not in environment
    pids = environment.split("PROCS:")[1].split()
    assert 1 <= len(pids) <= 7, pids  # bwrap's init, the card's exec server, timeout, bash,
    # ls, grep, tr: nothing else
    assert all(int(pid) < 50 for pid in pids), pids
    assert not (outside / "escape.txt").exists()
    assert not Path("/etc/kanban-sandbox-probe").exists()
    assert "PRIVATE-TMP-OK" in writes and not Path(private).exists()
    listed = writes.split("HOME:")[1]
    assert "kanban.db" not in listed and "config.toml" not in listed, listed
    assert "INSIDE-OK" in writes and not hidden.exists()
    assert "Read-only file system" in writes.split("HOME:")[1], writes
    assert (board.home / "workspaces" / "default" / str(card) / "inside.txt").exists()
    kinds = query(board.path, "SELECT data FROM event WHERE card_id = ? AND kind = 'sandbox'",
                  card)
    assert [json.loads(d)["runner"] for (d,) in kinds] == ["bwrap"]


@pytest.mark.parametrize(("network", "reach_host"), [(False, False), (True, False),
                                                     (True, True), (False, True)])
def test_a_loopback_server_is_reached_only_with_the_hosts_network(
        board: BoardFiles, network: bool, reach_host: bool) -> None:
    """A network of its own (the default) does not reach the host's loopback; the host's
    network (reach_host) does; no network reaches nothing, whatever reach_host says."""
    if network and not reach_host:
        require_own_network()
    configure(board, network=network, reach_host=reach_host)
    with loopback_server() as url:
        _, seen = run_card(board, [FETCH.format(url=url)])
    if network and reach_host:
        assert REACHED in seen[0] and "exit code 0" in seen[0]
    else:
        assert REACHED not in seen[0] and "exit code 1" in seen[0], seen[0]


def test_without_bwrap_a_required_sandbox_refuses_and_auto_says_so(
        board: BoardFiles, tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "timeout", "prlimit", "python3", "git"):
        found = [Path(d) / tool for d in os.environ["PATH"].split(":") if (Path(d) / tool).exists()]
        if found:
            (bare / tool).symlink_to(found[0])
    configure(board, network=True)
    card = board.add("needs a sandbox", profile="worker")
    with LLMServer(responder=scripted(["echo hi"], [])) as server:
        env = {**os.environ, **server.env(), "PATH": str(bare)}
        # the card it ran failed: exit 4 (kanban/cli/exit_codes.py)
        assert kanban(board.path, "dispatch", "--once", env=env, check=False).returncode == 4
        status, error = query(board.path, "SELECT status, error FROM card WHERE id = ?",
                              card)[0]
        assert status == "failed" and 'sandbox = "required"' in error, error
        board.configure((board.home / "config.toml").read_text()
                        .replace('sandbox = "required"', 'sandbox = "auto"'))
        second = board.add("plain is fine", profile="worker")
        kanban(board.path, "dispatch", "--once", env=env)
    assert query(board.path, "SELECT status FROM card WHERE id = ?", second)[0][0] == "done"
    (data,) = query(board.path, "SELECT data FROM event WHERE card_id = ? AND kind = 'sandbox'",
                    second)[0]
    assert json.loads(data)["runner"] == "plain"
    assert "bwrap is not installed" in json.loads(data)["note"]
    dispatcher = start_dispatcher(board.path, env=env, log=tmp_path / "d.log")
    try:  # `kanban status` says it for each live dispatcher (its host is the one that counts)
        wait_until(lambda: "commands: bwrap is not installed" in kanban(board.path,
                                                                           "status").stdout,
                   timeout=30, what="status naming the missing sandbox")
    finally:
        stop(dispatcher)
    assert "commands:" not in kanban(board.path, "status").stdout  # forgotten when it stops


def test_a_stdio_mcp_server_runs_in_the_same_sandbox(board: BoardFiles) -> None:
    outside = Path("/var/tmp") / f"kanban-mcp-escape-{uuid.uuid4().hex}"  # not under /tmp
    spec = board.script("mcp", [
        {"tool_calls": [{"name": "test__confinement", "arguments": {"path": str(outside)}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "probed"}}]}])
    board.configure(f'[profiles.mcp]\nmodel = "{spec}"\ntoolsets = ["kanban", "mcp:test"]\n'
                    'sandbox = "required"\nnetwork = false\n'
                    f'[mcp.test]\ncommand = "{sys.executable}"\nargs = ["{MCP_SERVER}"]\n')
    card = board.add("probe from the server", profile="mcp")
    kanban(board.path, "dispatch", "--once", env={**os.environ, "OPENAI_API_KEY": SECRET})
    assert query(board.path, "SELECT status FROM card WHERE id = ?", card)[0][0] == "done"
    (probe,) = query(board.path, """SELECT m.content FROM message m JOIN run r
        ON r.id = m.run_id WHERE r.card_id = ? AND m.name = 'test__confinement'""", card)[0]
    fields = dict(part.split("=", 1) for part in probe.split())
    assert int(fields["pids"]) <= 3 and int(fields["max"]) < 50, probe
    assert fields["wrote"] == "no" and fields["keys"] == "none" and not outside.exists()


def test_a_stdio_mcp_server_from_a_venv_under_tmp_starts_in_the_private_tmp(
        board: BoardFiles, tmp_path_factory: pytest.TempPathFactory) -> None:
    """/tmp is private in the sandbox: the server's venv (and its base Python) are bound."""
    venv = tmp_path_factory.mktemp("server-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    ours = next(p for p in sys.path if p.endswith("site-packages"))
    (site / "ours.pth").write_text(ours + "\n")  # the SDK, from the worker's own venv
    spec = board.script("mcp", [
        {"tool_calls": [{"name": "test__echo", "arguments": {"text": "from /tmp"}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "ok"}}]}])
    board.configure(f'[profiles.mcp]\nmodel = "{spec}"\ntoolsets = ["kanban", "mcp:test"]\n'
                    'sandbox = "required"\nnetwork = false\n'
                    f'[mcp.test]\ncommand = "{venv}/bin/python"\nargs = ["{MCP_SERVER}"]\n')
    card = board.add("echo from a venv under /tmp", profile="mcp")
    kanban(board.path, "dispatch", "--once", env={**os.environ, "OPENAI_API_KEY": SECRET})
    status, error = query(board.path, "SELECT status, error FROM card WHERE id = ?", card)[0]
    assert status == "done", error
    (echo,) = query(board.path, """SELECT m.content FROM message m JOIN run r
        ON r.id = m.run_id WHERE r.card_id = ? AND m.name = 'test__echo'""", card)[0]
    assert "echo: from /tmp" in echo
