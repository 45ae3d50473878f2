"""User hooks: `pre_tool`, `post_tool`, `on_turn` and `on_finish` functions.

They come from config (`"package.module:function"` per event) or from installed packages
through the `kanban.hooks` entry-point group, whose objects (a module, a class instance)
offer functions named after the events. Each hook gets one event record:

- `pre_tool(ToolEvent)`: return a string (or False) to veto the call; the model gets
  the reason as the call's error result. None/True lets it run.
- `post_tool(ToolEvent)` (with `result`): return a string to replace the result text.
- `on_turn(TurnEvent)`, `on_finish(FinishEvent)`: observe; the return value is ignored.

A hook that raises is reported through `on_error` and skipped; it never ends the run.
Tool hooks run on the tool-call threads, so they must be thread-safe.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from kanban.agent.types import ToolCall, ToolResult, Usage
from kanban.state.errors import ConfigError

EVENTS = ("pre_tool", "post_tool", "on_turn", "on_finish")
ENTRY_POINT_GROUP = "kanban.hooks"


@dataclass(frozen=True)
class ToolEvent:
    """A tool call about to run (`result` None) or just run."""

    call: ToolCall
    turn: int
    model: str
    context: Mapping[str, Any]
    result: ToolResult | None = None


@dataclass(frozen=True)
class TurnEvent:
    """A turn that just ended: the model's answer and the tools it ran."""

    turn: int
    model: str
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    cost: float | None
    context: Mapping[str, Any]


@dataclass(frozen=True)
class FinishEvent:
    """How the run ended."""

    stop_reason: str
    text: str | None
    turns: int
    usage: Usage
    cost: float
    error: str | None
    context: Mapping[str, Any]


Hook = Callable[[Any], Any]
OnError = Callable[[str, str], None]


@dataclass
class UserHooks:
    """The hooks of one run; `context` is handed to every hook (the worker puts the card's
    id, board and run there); `on_error(hook_name, message)` hears about failures."""

    hooks: dict[str, list[tuple[str, Hook]]] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)
    on_error: OnError = field(default=lambda name, message: None)

    def add(self, event: str, name: str, hook: Hook) -> None:
        if event not in EVENTS:
            raise ConfigError(f"unknown hook event {event!r} (known: {', '.join(EVENTS)})")
        self.hooks.setdefault(event, []).append((name, hook))

    def __bool__(self) -> bool:
        return any(self.hooks.values())

    def pre_tool(self, call: ToolCall, turn: int, model: str) -> str | None:
        """The first veto's reason, or None when every hook lets the call run."""
        event = ToolEvent(call, turn, model, self.context)
        for name, hook in self.hooks.get("pre_tool", ()):
            answer = self._call(name, hook, event)
            if answer is False:
                return f"vetoed by hook {name}"
            if isinstance(answer, str) and answer:
                return answer
        return None

    def post_tool(self, call: ToolCall, result: ToolResult, turn: int,
                  model: str) -> ToolResult:
        for name, hook in self.hooks.get("post_tool", ()):
            answer = self._call(name, hook, ToolEvent(call, turn, model, self.context, result))
            if isinstance(answer, str):
                result = ToolResult(answer, is_error=result.is_error, ends_run=result.ends_run)
        return result

    def on_turn(self, event: TurnEvent) -> None:
        for name, hook in self.hooks.get("on_turn", ()):
            self._call(name, hook, event)

    def on_finish(self, event: FinishEvent) -> None:
        for name, hook in self.hooks.get("on_finish", ()):
            self._call(name, hook, event)

    def _call(self, name: str, hook: Hook, event: Any) -> Any:
        try:
            return hook(event)
        except Exception as exc:  # a user's hook must never end the run
            self.on_error(name, f"{type(exc).__name__}: {exc}")
            return None


def load_hooks(
    configured: Mapping[str, Sequence[str]],
    *,
    use_entry_points: bool = True,
    context: Mapping[str, Any] | None = None,
    on_error: OnError | None = None,
) -> UserHooks:
    """Hooks from config (`{"pre_tool": ["pkg.mod:fn"]}`) and the `kanban.hooks` group.

    A hook named in config that cannot be imported is a configuration error (raised);
    a broken entry point is reported through `on_error` and skipped.
    """
    hooks = UserHooks(context=dict(context or {}),
                      on_error=on_error or (lambda name, message: None))
    for event, specs in configured.items():
        for spec in specs:
            hooks.add(event, spec, import_hook(spec))
    if use_entry_points:
        for name, target in _entry_point_objects(hooks.on_error):
            for event in EVENTS:
                hook = getattr(target, event, None)
                if callable(hook):
                    hooks.add(event, f"{name}.{event}", hook)
    return hooks


def import_hook(spec: str) -> Hook:
    """The function named by `package.module:function`."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ConfigError(f"hook {spec!r} must look like package.module:function")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:
        raise ConfigError(f"cannot load hook {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(target):
        raise ConfigError(f"hook {spec!r} is not callable")
    return target


@cache
def hook_points() -> tuple[EntryPoint, ...]:
    """The installed `kanban.hooks` entry points, scanned once per process: scanning every
    installed package costs tens of milliseconds, and a forkserver's workers inherit it."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _entry_point_objects(on_error: OnError) -> Iterable[tuple[str, Any]]:
    for point in hook_points():
        try:
            yield point.name, point.load()
        except Exception as exc:
            on_error(f"entry point {point.name}", f"{type(exc).__name__}: {exc}")
