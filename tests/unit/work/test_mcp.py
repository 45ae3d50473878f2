"""MCP servers through the official SDK: stdio and streamable HTTP, tools as NAME__tool,
crashes and timeouts as error results, restart on the next call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.agent.types import ToolCall
from kanban.state.config import McpServer
from kanban.tools.mcp import McpError, McpServers
from kanban.tools.registry import Toolbox
from tests.support.procs import wait_until

SERVER = str(Path(__file__).resolve().parents[2] / "support" / "mcp_server.py")


def stdio(**extra: object) -> McpServer:
    return McpServer(name="t", command=sys.executable, args=(SERVER,), **extra)  # type: ignore[arg-type]


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[McpServers]:
    made = McpServers({"t": stdio(timeout_s=1.5)}, cwd=tmp_path,
                      env={"PATH": os.environ["PATH"]})
    yield made
    made.close()


def call(box: Toolbox, name: str, **arguments: object) -> tuple[str, bool]:
    result = box.call(ToolCall("c", name, json.dumps(arguments)))
    return result.content, result.is_error


def test_stdio_tools_are_offered_and_called(servers: McpServers, tmp_path: Path) -> None:
    tools = servers.tools("t")
    assert [t.name for t in tools] == ["t__echo", "t__add", "t__fail", "t__hang", "t__whereami",
                                      "t__confinement", "t__peek"]
    assert all(t.toolset == "mcp:t" for t in tools)
    box = Toolbox(tools)
    assert call(box, "t__echo", text="hi") == ("echo: hi", False)
    assert call(box, "t__add", a=2, b=40) == ("42", False)
    assert call(box, "t__fail", message="boom") == ("Error executing tool fail: boom", True)
    assert call(box, "t__add", a="x", b=1)[1]  # schema from the server, checked before sending
    assert call(box, "t__whereami")[0] == f"cwd={tmp_path} keys=none"


def test_a_killed_server_is_an_error_result_and_restarts(servers: McpServers,
                                                         tmp_path: Path) -> None:
    box = Toolbox(servers.tools("t"))
    marker = tmp_path / "pid"

    def kill_when_called() -> None:
        wait_until(marker.exists, timeout=30, what="the hang tool")
        os.kill(int(marker.read_text()), signal.SIGKILL)

    killer = threading.Thread(target=kill_when_called)
    killer.start()
    content, is_error = call(box, "t__hang", marker=str(marker))
    killer.join()
    assert is_error and "stopped during the call" in content
    assert call(box, "t__echo", text="back") == ("echo: back", False)


def test_a_hung_call_times_out(servers: McpServers, tmp_path: Path) -> None:
    box = Toolbox(servers.tools("t"))
    content, is_error = call(box, "t__hang", marker=str(tmp_path / "pid"))
    assert is_error and "timed out" in content.lower()
    assert call(box, "t__echo", text="still there")[0] == "echo: still there"


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    broken = McpServers({"b": McpServer(name="b", command=str(tmp_path / "no-such-server"))},
                        cwd=tmp_path, env={})
    try:
        with pytest.raises(McpError, match="MCP server 'b' failed to start"):
            broken.tools("b")
    finally:
        broken.close()


def test_streamable_http(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, SERVER, "http", str(port_file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    made = None
    try:
        port = wait_until(lambda: port_file.exists() and port_file.read_text(), timeout=30,
                          what="the HTTP MCP server")
        url = f"http://127.0.0.1:{port}/mcp"
        made = McpServers({"h": McpServer(name="h", url=url, headers={"X-Test": "1"})},
                          cwd=tmp_path, env={})
        box = Toolbox(wait_until(lambda: _listed(made), timeout=30, what="MCP over HTTP"))
        assert call(box, "h__add", a=1, b=2) == ("3", False)
    finally:
        if made is not None:
            made.close()
        proc.terminate()
        proc.wait(timeout=10)


def _listed(made: McpServers) -> list | None:
    try:
        return made.tools("h")
    except McpError:
        return None  # the server is still binding its port
