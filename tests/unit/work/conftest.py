"""A workbench over a temporary workspace, and calling one tool the way an agent does."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kanban.agent.types import ToolCall, ToolResult
from kanban.state.config import Profile
from kanban.tools.catalog import REGISTRY
from kanban.tools.workbench import Workbench, command_env


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


@pytest.fixture
def bench(workspace: Path) -> Workbench:
    env = command_env({"PATH": os.environ["PATH"], "HOME": str(workspace.parent)}, workspace)
    return Workbench(workspace=workspace, profile=Profile(max_file_bytes=10_000,
                                                          tool_result_chars=400),
                     approval="deny", env=env)


def call(bench: Workbench, name: str, **arguments: Any) -> ToolResult:
    toolset = REGISTRY.get(name).toolset
    box = REGISTRY.toolbox([toolset], contexts={toolset: bench})
    return box.call(ToolCall("c1", name, json.dumps(arguments)))


def ok(bench: Workbench, name: str, **arguments: Any) -> str:
    result = call(bench, name, **arguments)
    assert not result.is_error, result.content
    return result.content


def refused(bench: Workbench, name: str, **arguments: Any) -> str:
    result = call(bench, name, **arguments)
    assert result.is_error, result.content
    return result.content
