"""What the work toolsets (file, terminal, web, MCP, plug-ins) are bound to in one worker:
its workspace, its profile's settings, a command runner and the card's deadline."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kanban.state.config import Profile, WebSettings
from kanban.tools.runner import PlainRunner, Runner, head_tail

if TYPE_CHECKING:
    from kanban.tools.scope import WorkerScope

OUTPUTS = ".kanban-outputs"  # whole outputs that were cut for the model, inside the workspace
_CREDENTIAL_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS")
_CREDENTIAL_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AZURE_OPENAI_")
_WORKER_ONLY = ("KANBAN_DB", "KANBAN_CLAIM_TOKEN", "KANBAN_RUN", "KANBAN_LEASE_S", "KANBAN_MODEL",
                "KANBAN_RESOLVED_WORKSPACE")


_CREDENTIAL_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_credential(name: str) -> bool:
    """Does a variable of this name hold a model or service credential? (Any `*_KEY`, and
    any name saying secret or password: AWS_SECRET_ACCESS_KEY, DB_PASSWORD_FILE, ...)"""
    upper = name.upper()
    return upper.endswith((*_CREDENTIAL_SUFFIXES, "_KEY")) \
        or any(word in upper for word in _CREDENTIAL_WORDS) \
        or upper.startswith(_CREDENTIAL_PREFIXES) \
        and not upper.endswith(("_BASE_URL", "_API_BASE", "_ORG_ID", "_PROJECT"))


def command_env(worker_env: Mapping[str, str], workspace: Path,
                drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The worker's (already scrubbed) environment minus model and service credentials and
    the worker's own claim on the board: what agents' commands and servers see."""
    out = {k: v for k, v in worker_env.items()
           if not k.endswith(_CREDENTIAL_SUFFIXES) and not k.startswith(_CREDENTIAL_PREFIXES)
           and k not in _WORKER_ONLY and k not in drop}
    out.update(KANBAN_WORKSPACE=str(workspace), TERM="dumb", PAGER="cat", GIT_PAGER="cat",
               GIT_TERMINAL_PROMPT="0")
    return out


@dataclass
class Workbench:
    """One worker's tools context. `scope` is None outside a worker (tests, tools alone)."""

    workspace: Path
    profile: Profile = field(default_factory=Profile)
    approval: str = "ask"  # resolved: deny | ask | allow
    env: Mapping[str, str] = field(default_factory=dict)  # commands' environment
    runner: Runner = field(default_factory=PlainRunner)
    deadline: float | None = None  # time.monotonic() by which the card's run must end
    web: WebSettings = field(default_factory=WebSettings)
    search_key: str | None = None  # the web search API key, when one is configured
    scope: WorkerScope | None = None
    mcp: Any = None  # kanban.tools.mcp.McpServers when the profile names MCP servers
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def output_path(self, kind: str) -> Path:
        """A fresh file under the workspace's output folder."""
        run = self.scope.run_id if self.scope is not None else os.getpid()
        folder = self.workspace / OUTPUTS
        folder.mkdir(exist_ok=True, mode=0o700)
        return folder / f"{kind}-{run}-{next(self._counter)}.txt"

    def bounded(self, text: str, kind: str) -> str:
        """`text`, or its head and tail with the whole of it saved in the workspace."""
        cap = self.profile.tool_result_chars
        if len(text) <= cap:
            return text
        path = self.output_path(kind)
        path.write_text(text, encoding="utf-8")
        cut, _ = head_tail(path, cap)
        return cut.replace(str(path), f"{OUTPUTS}/{path.name}")
