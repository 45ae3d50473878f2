"""API keys never reach the database, the logs, the transcripts or any `--json` output.

The worker runs the real openai client against the local fake LLM server, so the key is
really used (the server sees it in the Authorization header) and could really leak.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kanban.service import Kanban
from kanban.state.config_file import load_config
from kanban.worker.main import WorkerEnv, run_card
from tests.acceptance.conftest import BoardFiles
from tests.support.hostile import WarmCli, clean_env, parent_pid, proc_environ, rows
from tests.support.llm_server import (
    LLMServer,
    Reply,
    called_tools,
    error_reply,
    tool_reply,
    unauthorized,
)
from tests.support.procs import start_dispatcher, wait_until

OPENAI_KEY = "sk-test-SECRET123"
ANTHROPIC_KEY = "sk-ant-test-SECRET456"
MARKERS = ("SECRET123", "SECRET456")


def _files_with_secrets(folder: Path) -> list[str]:
    """Every file under `folder` (database, -wal, -shm, logs, workspaces, the dispatcher's
    output) holding a key."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and any(m.encode() in p.read_bytes() for m in MARKERS))


def test_api_keys_never_reach_storage_logs_or_json_output(board: BoardFiles, tmp_path: Path,
                                                          warm_cli: WarmCli) -> None:
    live = threading.Event()
    go_on = threading.Event()

    def responder(body: dict[str, Any]) -> Reply:
        if "unauthorized call" in json.dumps(body):
            return unauthorized()
        if not called_tools(body):
            live.set()
            go_on.wait(30)  # the worker stays live while `workers --json` looks at it
            return tool_reply(("kanban_comment", {"body": "working"}),
                              ("kanban_heartbeat", {"note": "halfway"}))
        return tool_reply(("kanban_complete", {"summary": "all good"}))

    board.configure('[profiles.oa]\nmodel = "openai:gpt-4o-mini"\n')
    good = board.add("talks to the model", profile="oa")
    bad = board.add("unauthorized call", profile="oa", max_attempts=3)
    home = tmp_path / "home"
    outputs: dict[str, str] = {}
    with LLMServer(responder=responder) as server:
        env = clean_env(home, {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
                               "OPENAI_BASE_URL": server.openai_base_url})
        d = start_dispatcher(board.path, "--once", env=env, log=tmp_path / "dispatch.log")
        try:
            assert live.wait(60), "the worker never called the model"
            worker = wait_until(lambda: rows(board.path, "SELECT pid FROM run WHERE card_id = ? "
                                                         "AND pid IS NOT NULL", good),
                                timeout=30, what="the worker's pid")[0][0]
            # A forked worker's /proc environ is its forkserver's: the worker's own variables
            # (its key included) are set after the fork, in os.environ. So this proves that
            # the warm parent, and so every fork of it, starts without credentials.
            warm_environs = [proc_environ(worker), proc_environ(parent_pid(worker))]
            for command in (("workers", "--json"), ("status", "--json")):
                outputs[" ".join(command)] = _json_out(warm_cli, board.path, command, home)
        finally:
            go_on.set()
            code = d.wait(timeout=60)
        authorizations = {r.headers.get("authorization") for r in server.requests}
    for command in (("show", str(good), "--json"), ("show", str(bad), "--json"),
                    ("log", str(good), "--json"), ("log", str(bad), "--json"),
                    ("list", "--json"), ("board", "--json")):
        outputs[" ".join(command)] = _json_out(warm_cli, board.path, command, home)
    assert code == 4  # `bad` failed: a card the pass ran is not done (kanban/cli/exit_codes.py)
    assert authorizations == {f"Bearer {OPENAI_KEY}"}  # the key was really in the worker
    assert f'"card_id": {good}' in outputs["workers --json"]
    assert [[k for k, v in e.items() if "SECRET" in v] for e in warm_environs] == [[], []]
    assert "KANBAN_CARD" not in warm_environs[1]  # that was the forkserver, not a worker
    assert rows(board.path, "SELECT status FROM card ORDER BY id") == [("done",), ("failed",)]
    status, attempt, error = rows(board.path, "SELECT status, attempt, error FROM card "
                                              "WHERE id = ?", bad)[0]
    assert (status, attempt) == ("failed", 1)  # fatal at once: no attempts burnt on a 401
    assert "401" in error or "authentic" in error.lower(), error
    assert rows(board.path, "SELECT outcome FROM run WHERE card_id = ?", bad) == [("failed",)]
    leaks = {name: [m for m in MARKERS if m in text] for name, text in outputs.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    assert _files_with_secrets(board.home) == []
    assert len(list((board.home / "logs").glob("*.log"))) == 2


def test_an_echoed_key_in_a_provider_error_is_not_stored(board: BoardFiles,
                                                         capfd: pytest.CaptureFixture[str]
                                                         ) -> None:
    board.configure('[profiles.oa]\nmodel = "openai:gpt-4o-mini"\n')
    card = board.add("echoing proxy", profile="oa")
    with LLMServer() as server:
        server.enqueue(error_reply(401, f"Incorrect API key provided: {OPENAI_KEY}"))
        claim = board.kb.claim(1, lease_s=30)[0]
        wenv = WorkerEnv(str(board.path), "default", card, claim.claim_token, claim.run_id, 30)
        env = {"OPENAI_API_KEY": OPENAI_KEY, "OPENAI_BASE_URL": server.openai_base_url}
        run_card(Kanban(board.kb.db), wenv, load_config(board.home / "config.toml"), env)
    worker_output = "".join(capfd.readouterr())
    assert board.kb.card(card).status == "failed"  # the real worker path ran to its end
    assert "SECRET123" not in worker_output
    assert _files_with_secrets(board.home) == []


def _json_out(warm: WarmCli, db: Path, command: tuple[str, ...], home: Path) -> str:
    run = warm.run(db, *command, env=clean_env(home))
    assert (run.code, run.stderr) == (0, ""), (command, run.stderr)
    json.loads(run.stdout)
    return run.stdout

