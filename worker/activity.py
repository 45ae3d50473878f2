"""What a worker's agent is doing right now, kept in memory and written out throttled.

The agent's hooks update it from any thread (a streamed token, a tool starting); the
heartbeat thread takes a snapshot when something changed and stores it on the run row.
A change of phase (a model call or tool starting, a tool ending) is written at once;
counters that move with every streamed token at most every `COUNTS_EVERY_S`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

COUNTS_EVERY_S = 1.0
CHARS_PER_TOKEN = 4
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


def tool_name(name: str) -> str:
    """A tool name fit to show: models stream names, and names may be anything."""
    return name if _TOOL_NAME.match(name) else "(unknown tool)"


class Activity:
    def __init__(self, *, max_turns: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self.urgent = threading.Event()  # set on a phase change: wakes the writer
        self._state: dict[str, Any] = {"phase": "starting", "turn": 0, "max_turns": max_turns,
                                       "model": None, "tools": [], "tokens": 0, "cost": 0.0}
        self._running: dict[str, int] = {}  # tool name → calls of it running now
        self._base_tokens = 0
        self._streamed = 0
        self._changed = True
        self._counts_changed = False
        self._written_at = float("-inf")

    # --- updates from the agent's hooks -----------------------------------------------

    def plan(self, max_turns: int) -> None:
        with self._lock:
            self._state["max_turns"] = max_turns

    def model_call(self, turn: int, model: str, *, wake: bool = True) -> None:
        """`wake=False`: the caller stores the change itself (with its own write)."""
        with self._lock:
            self._streamed = 0
            self._set(phase="model", turn=turn, model=model, tools=[], wake=wake)

    def streamed(self, chars: int, *, reasoning: bool = False, tool: str | None = None) -> None:
        """Some of the answer arrived: count it; a tool call being written is a phase."""
        with self._lock:
            self._streamed += chars
            self._state["tokens"] = self._base_tokens + self._streamed // CHARS_PER_TOKEN
            self._counts_changed = True
            if tool:
                self._set(phase="writing", tools=[tool_name(tool)])
            elif reasoning and self._state["phase"] == "model":
                self._set(phase="thinking")

    def restart(self) -> None:
        with self._lock:
            self._streamed = 0

    def used(self, tokens: int, cost: float) -> None:
        """The totals of the run after a model call."""
        with self._lock:
            self._base_tokens, self._streamed = tokens, 0
            self._state["tokens"], self._state["cost"] = tokens, round(cost, 6)
            self._counts_changed = True

    def tool_started(self, name: str) -> None:
        name = tool_name(name)
        with self._lock:
            self._running[name] = self._running.get(name, 0) + 1
            self._set(phase="tools", tools=sorted(self._running))

    def tool_ended(self, name: str) -> None:
        name = tool_name(name)
        with self._lock:
            left = self._running.get(name, 1) - 1
            if left > 0:
                self._running[name] = left
            else:
                self._running.pop(name, None)
            self._set(tools=sorted(self._running))

    def finished(self, outcome: str) -> None:
        with self._lock:
            self._running.clear()
            self._set(phase="finished", tools=[], outcome=outcome)

    def _set(self, *, wake: bool = True, **values: Any) -> None:
        changed = any(self._state.get(k) != v for k, v in values.items())
        self._state.update(values)
        if changed:
            self._changed = True
            if wake:
                self.urgent.set()

    # --- the writer's side --------------------------------------------------------------

    def take(self) -> dict[str, Any] | None:
        """A snapshot to store, or None when nothing worth a write changed."""
        with self._lock:
            now = self._clock()
            due = self._counts_changed and now - self._written_at >= COUNTS_EVERY_S
            if not (self._changed or due):
                return None
            self._changed = self._counts_changed = False
            self._written_at = now
            return dict(self._state, tools=list(self._state["tools"]))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state)
