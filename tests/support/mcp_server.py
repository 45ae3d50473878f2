"""A small MCP server for tests, built on the official SDK.

`python tests/support/mcp_server.py [stdio | http PORT_FILE]`. Tools: `echo(text)`,
`add(a, b)`, `fail(message)` (an error result), `hang(marker)` (writes its pid to `marker`,
then waits: a test kills it mid-call), `whereami()` (cwd and whether model keys leaked),
`confinement(path)` (what a sandbox lets it see and write), `peek(paths, sockets)` (what it
can read, which Unix sockets answer).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("kanban-test", log_level="CRITICAL")


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ToolError(message)


@app.tool()
def hang(marker: str) -> str:
    """Write this server's pid to `marker`, then wait a long time."""
    Path(marker).write_text(str(os.getpid()))
    time.sleep(120)
    return "woke up"


@app.tool()
def whereami() -> str:
    """The server's working directory and whether it sees model credentials."""
    leaked = sorted(k for k in os.environ if k.endswith("_API_KEY"))
    return f"cwd={os.getcwd()} keys={','.join(leaked) or 'none'}"


@app.tool()
def confinement(path: str) -> str:
    """The processes this server sees, its model keys, and whether it can write `path`."""
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    try:
        Path(path).write_text("written")
        wrote = "yes"
    except OSError:
        wrote = "no"
    leaked = sorted(k for k in os.environ if k.endswith("_API_KEY"))
    return f"pids={len(pids)} max={max(pids)} wrote={wrote} keys={','.join(leaked) or 'none'}"


@app.tool()
def peek(paths: list[str], sockets: list[str]) -> str:
    """What this server can read of `paths` (a file's first line, or the error) and whether
    each Unix socket of `sockets` answers."""
    lines = []
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                lines.append(f"{path}: read {f.readline(200).strip()}")
        except OSError as exc:
            lines.append(f"{path}: {exc.strerror}")
    for place in sockets:
        try:
            with socket.socket(socket.AF_UNIX) as conn:
                conn.settimeout(3)
                conn.connect(place)
                lines.append(f"{place}: answered {conn.recv(200).decode(errors='replace')}")
        except OSError as exc:
            lines.append(f"{place}: {exc.strerror}")
    return "\n".join(lines)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        port = _free_port()
        Path(sys.argv[2]).write_text(str(port))
        app.run("streamable-http", host="127.0.0.1", port=port)
    else:
        app.run()
