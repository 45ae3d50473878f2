"""One turn's tool calls: run together where allowed, answered in call order, bounded,
exclusive ones last and alone; user hooks veto, rewrite and fail safely."""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from kanban.agent import (
    AgentHooks,
    Limits,
    ScriptedModel,
    StopReason,
    ToolResult,
    run_agent,
    text,
    tool_calls,
    user_hooks,
)
from kanban.agent.tool_calls import AFTER_END_TEXT
from kanban.agent.user_hooks import (
    FinishEvent,
    ToolEvent,
    TurnEvent,
    UserHooks,
    import_hook,
    load_hooks,
)
from kanban.state.errors import ConfigError
from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import make_tool


def run(steps: list[Any], toolbox: Toolbox, **kwargs: Any):
    return run_agent(ScriptedModel(steps), system="s", prompt="go", toolbox=toolbox, **kwargs)


def tool_messages(result: Any) -> list[str | None]:
    return [m.content for m in result.messages if m.role == "tool"]


def test_parallel_calls_run_at_the_same_time_and_answer_in_call_order() -> None:
    barrier = threading.Barrier(3, timeout=10)  # breaks unless all three run at once

    def meet(args: dict[str, Any]) -> str:
        barrier.wait()
        return f"done {args['n']}"

    tool = make_tool("meet", meet, properties={"n": {"type": "integer"}})
    calls = tool_calls([("meet", {"n": 1}), ("meet", {"n": 2}), ("meet", {"n": 3})])
    result = run([calls, text("ok")], Toolbox([tool]))
    assert tool_messages(result) == ["done 1", "done 2", "done 3"]
    ids = [c.id for c in result.messages[2].tool_calls]
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == ids


def test_the_pool_is_bounded() -> None:
    lock, running, peak = threading.Lock(), [0], [0]
    both = threading.Barrier(2, timeout=10)

    def work(args: dict[str, Any]) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        both.wait()  # two at a time can always meet; a third never runs alongside
        with lock:
            running[0] -= 1
        return "ok"

    tool = make_tool("work", work)
    calls = tool_calls([("work", {})] * 6)
    result = run([calls, text("ok")], Toolbox([tool]), limits=Limits(max_parallel=2))
    assert tool_messages(result) == ["ok"] * 6
    assert peak[0] == 2


def test_exclusive_calls_run_alone_after_the_others() -> None:
    order: list[str] = []
    lock = threading.Lock()

    def note(name: str) -> Any:
        def handler(args: dict[str, Any]) -> str:
            with lock:
                order.append(f"start {name}")
            with lock:
                order.append(f"end {name}")
            return name

        return handler

    finish = replace(make_tool("finish", lambda args: ToolResult("finished", ends_run=True)),
                     exclusive=True)
    serial = replace(make_tool("serial", note("serial")), parallel=False)
    tools = Toolbox([finish, serial, make_tool("a", note("a")), make_tool("b", note("b"))])
    calls = tool_calls([("finish", {}), ("serial", {}), ("a", {}), ("b", {}), ("finish", {})])
    result = run([calls, text("never")], tools)
    assert result.stop_reason is StopReason.COMPLETED
    # Results in call order; the second finish never ran: the first ended the run.
    assert tool_messages(result) == ["finished", "serial", "a", "b", AFTER_END_TEXT]
    assert order[-2:] == ["start serial", "end serial"]  # after the parallel pair
    assert set(order[:4]) == {"start a", "end a", "start b", "end b"}


def test_registry_tools_declare_parallel_safety() -> None:
    from kanban.tools.catalog import REGISTRY

    specs = {s.name: s for s in REGISTRY.toolbox(["kanban", "delegate"], object()).specs()}
    assert specs["kanban_complete"].exclusive and specs["kanban_block"].exclusive
    assert not specs["kanban_complete"].parallel
    assert specs["kanban_show"].parallel and not specs["kanban_show"].exclusive
    assert not specs["kanban_create"].parallel and not specs["kanban_comment"].parallel
    assert not specs["delegate"].parallel and not specs["delegate"].exclusive


class Recorder(AgentHooks):
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []
        self.started: list[str] = []

    def on_hook_error(self, hook: str, message: str) -> None:
        self.errors.append((hook, message))

    def on_tool_start(self, call: Any) -> None:
        self.started.append(call.name)


def test_pre_tool_veto_reaches_the_model_and_post_tool_rewrites() -> None:
    ran: list[str] = []
    rm = make_tool("rm", lambda args: ran.append("rm") or "removed")
    echo = make_tool("echo", lambda args: "secret-ish output")
    hooks = UserHooks()
    hooks.add("pre_tool", "guard", lambda e: "rm is not allowed here" if e.call.name == "rm"
              else None)
    hooks.add("post_tool", "scrub", lambda e: e.result.content.replace("secret", "[x]"))
    result = run([tool_calls([("rm", {}), ("echo", {})]), text("ok")], Toolbox([rm, echo]),
                 user_hooks=hooks)
    vetoed, echoed = [m for m in result.messages if m.role == "tool"]
    assert vetoed.is_error and vetoed.content == "not run: rm is not allowed here"
    assert echoed.content == "[x]-ish output"
    assert ran == []


def test_a_failing_hook_is_recorded_and_the_run_goes_on() -> None:
    seen: list[Any] = []

    def broken(event: Any) -> None:
        raise RuntimeError("hook bug")

    hooks = UserHooks()
    for event in ("pre_tool", "post_tool", "on_turn", "on_finish"):
        hooks.add(event, f"broken_{event}", broken)
    hooks.add("on_turn", "watch", seen.append)
    hooks.add("on_finish", "watch", seen.append)
    recorder = Recorder()
    echo = make_tool("echo", lambda args: "fine")
    result = run([tool_calls([("echo", {})]), text("done")], Toolbox([echo]),
                 user_hooks=hooks, hooks=recorder)
    assert result.stop_reason is StopReason.COMPLETED
    assert tool_messages(result) == ["fine"]
    assert {name for name, _ in recorder.errors} == {
        "broken_pre_tool", "broken_post_tool", "broken_on_turn", "broken_on_finish"}
    assert all(message == "RuntimeError: hook bug" for _, message in recorder.errors)
    turns = [e for e in seen if isinstance(e, TurnEvent)]
    assert [t.turn for t in turns] == [1, 2] and turns[0].tool_calls[0].name == "echo"
    (finish,) = [e for e in seen if isinstance(e, FinishEvent)]
    assert finish.stop_reason == "completed" and finish.text == "done" and finish.turns == 2


def test_hooks_load_from_config_names_and_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    class Plugin:
        @staticmethod
        def pre_tool(event: ToolEvent) -> bool:
            return event.call.name != "blocked"

    class Point:
        name = "plugin"

        def load(self) -> type[Plugin]:
            return Plugin

    class Broken:
        name = "broken"

        def load(self) -> None:
            raise ImportError("no such package")

    monkeypatch.setattr("kanban.agent.user_hooks.entry_points",
                        lambda group: [Point(), Broken()] if group == "kanban.hooks" else [])
    # scanned once per process: this test scans the patched set into a cache of its own
    monkeypatch.setattr(user_hooks, "hook_points", cache(user_hooks.hook_points.__wrapped__))
    errors: list[tuple[str, str]] = []
    hooks = load_hooks({"on_finish": ["json:dumps"]}, context={"card_id": 7},
                       on_error=lambda name, message: errors.append((name, message)))
    assert [name for name, _ in hooks.hooks["on_finish"]] == ["json:dumps"]
    assert [name for name, _ in hooks.hooks["pre_tool"]] == ["plugin.pre_tool"]
    assert errors == [("entry point broken", "ImportError: no such package")]
    blocked = tool_calls([("blocked", {})]).tool_calls[0]
    assert hooks.pre_tool(blocked, 1, "m") == "vetoed by hook plugin.pre_tool"
    assert not load_hooks({}, use_entry_points=False)


@pytest.mark.parametrize(("spec", "words"), [
    ("no-colon", "must look like package.module:function"),
    ("no_such_module_here:fn", "cannot load hook"),
    ("json:no_such_function", "cannot load hook"),
    ("json:__doc__", "is not callable"),
])
def test_bad_hook_names_are_configuration_errors(spec: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        import_hook(spec)


def test_unknown_hook_event_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown hook event"):
        UserHooks().add("before_everything", "x", print)
