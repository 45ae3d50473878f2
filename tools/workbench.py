"""What the work toolsets (file, terminal, web, MCP, plug-ins) are bound to in one worker:
its workspace, its profile's settings, a command runner and the card's deadline."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kanban.state.beneath import Wall
from kanban.state.config import Profile, WebSettings
from kanban.state.errors import KanbanError
from kanban.state.network import HostList, Network
from kanban.tools.confine import write_from
from kanban.tools.runner import PlainRunner, Runner

if TYPE_CHECKING:
    from kanban.tools.scope import WorkerScope

OUTPUTS = ".kanban-outputs"  # whole outputs that were cut for the model, inside the workspace
# _HEADERS: OTLP_HEADERS hold a trace collector's authorization (docs/traces.md)
_CREDENTIAL_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_CREDENTIALS",
                        "_HEADERS")
_CREDENTIAL_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AZURE_OPENAI_")
_WORKER_ONLY = ("KANBAN_DB", "KANBAN_CLAIM_TOKEN", "KANBAN_RUN", "KANBAN_LEASE_S", "KANBAN_MODEL",
                "KANBAN_RESOLVED_WORKSPACE", "KANBAN_DB_SLOTS")  # slots: a command could hog


_CREDENTIAL_WORDS = ("SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


class NoNetwork(KanbanError):
    """The card may not reach the network."""


def cut_text(data: bytes, cap: int, where: str) -> str:
    """The head and tail of `data` (cap/2 bytes each) with a marker saying where the whole
    is (as runner.head_tail says it of a file)."""
    half = max(1, cap // 2)
    head = data[:half].decode("utf-8", "replace")
    tail = data[len(data) - half:].decode("utf-8", "replace")
    return head + f"\n[... {len(data) - 2 * half} bytes cut; the whole output is in " \
        f"{where} ...]\n" + tail


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
    network: Network | None = None  # the card's, ancestors' lists applied; None: the profile's
    # Folders no tool may reach (the board's: kanban.worker.sandboxing.hidden_folders, the
    # same list the sandbox hides from commands)
    hidden: tuple[Path, ...] = ()
    # Places the file tools read but never write: what the sandbox shows commands read-only
    # (kanban.worker.sandboxing.RunnerChoice.readonly)
    readonly: tuple[Path, ...] = ()
    # The card's own HOME in its sandbox (on the board's disk): counted in its budget
    own_home: Path | None = None
    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _private: Path | None = None  # where commands' outputs are written first

    def hosts(self) -> HostList | None:
        """The hosts the web tools may reach (None: any); KanbanError without a network."""
        network = self.profile.network if self.network is None else self.network
        if network is False:
            raise NoNetwork("this card has no network (network = false in its profile or "
                            "a delegating card's)")
        if network is True:
            return None
        return HostList(network, self.profile.network_hosts)

    def remaining_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def wall(self) -> Wall:
        """The workspace as the file tools reach it: race-free, the hidden folders refused."""
        return Wall(self.workspace, self.hidden, self.readonly)

    def output_path(self, kind: str) -> Path:
        """A fresh file for a command's output, in a folder of the worker's own outside the
        workspace (what a command plants in the workspace cannot redirect it); `keep_output`
        moves it into the workspace, `drop_output` removes it."""
        if self._private is None or not self._private.is_dir():
            self._private = Path(tempfile.mkdtemp(prefix="kanban-outputs-"))
        return self._private / self._output_name(kind)

    def keep_output(self, path: Path) -> str:
        """Copy a command's output into the workspace's output folder (through the wall);
        the name the model should see, or why it could not be kept."""
        name = f"{OUTPUTS}/{path.name}"
        try:
            with self.wall().resolve(name, make_folders=True) as found, \
                    open(path, "rb") as source:
                write_from(found, name, source)
        except (KanbanError, OSError) as exc:
            name = f"nowhere ({exc})"
        self.drop_output(path)
        return name

    def drop_output(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: another output is in flight
            path.parent.rmdir()

    def bounded(self, text: str, kind: str) -> str:
        """`text`, or its head and tail with the whole of it saved in the workspace."""
        cap = self.profile.tool_result_chars
        if len(text) <= cap:
            return text
        name = f"{OUTPUTS}/{self._output_name(kind)}"
        data = text.encode("utf-8")
        try:  # a symlink planted at the output folder must not carry the write out
            with self.wall().resolve(name, make_folders=True) as found:
                write_from(found, name, io.BytesIO(data))
            where = name
        except KanbanError as exc:
            where = f"nowhere ({exc})"
        return cut_text(data, cap, where)

    def _output_name(self, kind: str) -> str:
        run = self.scope.run_id if self.scope is not None else os.getpid()
        return f"{kind}-{run}-{next(self._counter)}.txt"
