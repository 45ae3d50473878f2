"""A profile's endpoint travels with its model: `[profiles.lead] base_url` alone takes a
lead and every child that runs on the lead's model to a local server.

The trap: the SDK picks its host as the client's base_url, else OPENAI_BASE_URL, else the
provider's public host. The commands here get OPENAI_BASE_URL pointing at a second local
server that records every call, so any process that does not use the profile's base_url
lands on the trap (and the test fails) instead of on the internet. An unset variable would
make a regression leave the machine; a proxy variable would not reach the workers, whose
environment the dispatcher scrubs.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import (
    TEST_API_KEY,
    LLMServer,
    Reply,
    called_tools,
    error_reply,
    last_user_text,
    text_reply,
    tool_reply,
    tool_results,
)
from tests.support.procs import kanban, query

TASKS = [{"title": "alpha", "goal": "a"}, {"title": "beta", "goal": "b"}]


def _model(body: dict[str, Any], tasks: list[dict[str, str]] = TASKS) -> Reply:
    tools = [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]
    if "delegate" in tools:
        if "delegate" not in called_tools(body):
            return tool_reply(("delegate", {"tasks": tasks}))
        kids = json.loads(tool_results(body)[-1])["children"]
        return text_reply("ANSWER: " + "; ".join(str(c.get("summary")) for c in kids))
    if "kanban_complete" in called_tools(body):
        return text_reply("finished")
    title = re.search(r"Your card is #\d+: (.+)", last_user_text(body) or "")
    return tool_reply(("kanban_complete", {"summary": f"{title.group(1) if title else '?'} "
                                                      "done locally"}))


def _env(trap: LLMServer, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    return {**env, "OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": trap.openai_base_url,
            **extra}


def test_lead_and_children_reach_the_lead_profiles_base_url(board: BoardFiles) -> None:
    with LLMServer(responder=_model) as local, \
            LLMServer(responder=lambda body: error_reply(500, "the trap")) as trap:
        board.configure(f'[profiles.lead]\nbase_url = "{local.openai_base_url}"\n')
        out = kanban(board.path, "run", "Two parts", "--model", "openai:test-model",
                     env=_env(trap)).stdout
        lead = query(board.path, "SELECT max(id) FROM card WHERE created_by = 'lead'")[0][0]
        context = kanban(board.path, "context", str(lead + 1), env=_env(trap)).stdout
        assert trap.requests == []  # nothing went to the SDK's default host
        assert len(local.requests) >= 4  # the lead twice, each child once at least
        host = local.openai_base_url.removeprefix("http://")
    assert "ANSWER: alpha done locally; beta done locally" in out
    kids = query(board.path, "SELECT status FROM card WHERE parent_id = ?", lead)
    assert kids == [("done",), ("done",)]
    assert f"at {host}" in context  # the child's endpoint, as its worker reaches it


def test_a_child_whose_profile_names_a_model_uses_that_profiles_endpoint(
        board: BoardFiles) -> None:
    tasks = [{"title": "alpha", "goal": "a"},
             {"title": "beta", "goal": "b", "profile": "other"}]
    with LLMServer(responder=lambda body: _model(body, tasks)) as local, \
            LLMServer(responder=_model) as elsewhere, \
            LLMServer(responder=lambda body: error_reply(500, "the trap")) as trap:
        board.configure(f'[profiles.lead]\nbase_url = "{local.openai_base_url}"\n'
                        f'[profiles.other]\nmodel = "openai:other-model"\n'
                        f'base_url = "{elsewhere.openai_base_url}"\n')
        out = kanban(board.path, "run", "Two parts", "--model", "openai:test-model",
                     env=_env(trap)).stdout
        assert trap.requests == []
        lead_models = {r.body.get("model") for r in local.requests}
        other_models = {r.body.get("model") for r in elsewhere.requests}
    assert "ANSWER: alpha done locally; beta done locally" in out
    assert (lead_models, other_models) == ({"test-model"}, {"other-model"})


def test_api_key_env_on_the_lead_profile_is_enough_for_kanban_run(board: BoardFiles) -> None:
    with LLMServer(responder=_model) as local, \
            LLMServer(responder=lambda body: error_reply(500, "the trap")) as trap:
        board.configure(f'[profiles.lead]\nbase_url = "{local.openai_base_url}"\n'
                        'api_key_env = ["LOCAL_LLM_KEY"]\n')
        env = {k: v for k, v in _env(trap).items() if k != "OPENAI_API_KEY"}
        out = kanban(board.path, "run", "Two parts", "--model", "openai:test-model",
                     env={**env, "LOCAL_LLM_KEY": "local-key-123456"}).stdout
        assert trap.requests == []
        keys = {r.headers.get("authorization") for r in local.requests}
    assert keys == {"Bearer local-key-123456"}  # the children used the lead's key too
    assert "ANSWER: alpha done locally; beta done locally" in out


def test_a_model_error_names_the_endpoint_and_never_the_key(board: BoardFiles,
                                                           tmp_path: Path) -> None:
    with LLMServer(responder=lambda body: error_reply(401, "bad key")) as local, \
            LLMServer(responder=lambda body: error_reply(500, "the trap")) as trap:
        board.configure(f'[profiles.lead]\nbase_url = "{local.openai_base_url}"\n')
        proc = kanban(board.path, "run", "Two parts", "--model", "openai:test-model",
                      env=_env(trap), check=False)
        assert trap.requests == []
        host = local.openai_base_url.removeprefix("http://")
    assert proc.returncode == 3  # the lead failed (kanban/cli/exit_codes.py)
    assert f"(at {host})" in proc.stderr
    assert TEST_API_KEY not in proc.stderr
