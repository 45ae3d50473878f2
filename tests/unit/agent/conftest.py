"""Fixtures for agent unit tests."""

from __future__ import annotations

import json

import pytest

from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import FakeClock, make_tool


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def echo_toolbox() -> Toolbox:
    """Tools `echo(text)` and `add(a, b)`."""
    echo = make_tool(
        "echo",
        lambda args: json.dumps({"echo": args["text"]}),
        properties={"text": {"type": "string"}},
        required=["text"],
    )
    add = make_tool(
        "add",
        lambda args: str(args["a"] + args["b"]),
        properties={"a": {"type": "integer"}, "b": {"type": "integer"}},
        required=["a", "b"],
    )
    return Toolbox([echo, add])
