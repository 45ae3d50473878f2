"""Named scripts for `scripted:NAME` specs, JSON-file scripts, and the built-in `demo`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import kanban.agent.interrupt as interrupt
from kanban.agent.errors import FatalModelError
from kanban.agent.scripted import ScriptedModel, Step, text, tool_call, tool_calls
from kanban.agent.types import Message, ModelResponse, ToolSpec

ScriptFactory = Callable[[], ScriptedModel | Iterable[Step]]
_SCRIPTS: dict[str, ScriptFactory] = {}


def register_script(name: str, factory: ScriptFactory) -> ScriptFactory:
    """Make `scripted:NAME` available; a later registration under the same name replaces it."""
    _SCRIPTS[name] = factory
    return factory


def script_names() -> list[str]:
    return sorted(_SCRIPTS)


def load_script(name: str) -> ScriptedModel:
    """The model for `scripted:NAME`: a registered script, or a JSON file when NAME is a path."""
    spec = f"scripted:{name}"
    if "/" in name or name.endswith(".json"):
        return ScriptedModel(steps_from_file(Path(name)), name=spec, interruptible=True)
    factory = _SCRIPTS.get(name)
    if factory is None:
        known = ", ".join(script_names()) or "none"
        raise FatalModelError(f"unknown script {name!r} in {spec!r} (known: {known})")
    made = factory()
    if isinstance(made, ScriptedModel):
        made.name = spec
        return made
    return ScriptedModel(made, name=spec)


def steps_from_file(path: Path) -> list[Step]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise FatalModelError(f"cannot read script file {str(path)!r}: {exc}") from exc
    return steps_from_json(data, source=str(path))


def steps_from_json(data: Any, *, source: str = "script") -> list[Step]:
    """Steps from `[{"text": ...}, {"tool_calls": [{"name": ..., "arguments": {...}}]}, ...]`;
    a step may add `"reasoning": "..."` and `"delay_s": seconds`."""
    if not isinstance(data, list):
        raise FatalModelError(f"{source}: a script must be a JSON list of steps")
    return [_step_from_json(item, f"{source}[{index}]") for index, item in enumerate(data)]


def _step_from_json(item: Any, where: str) -> Step:
    """One step; `delay_s` makes the model take that long to answer (simulated latency)."""
    if not isinstance(item, dict) or not ({"text", "tool_calls"} & item.keys()):
        raise FatalModelError(f"{where}: a step needs a 'text' or a 'tool_calls' key")
    delay = item.get("delay_s", 0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or not 0 <= delay <= 3600:
        raise FatalModelError(f"{where}: 'delay_s' must be a number of seconds (0-3600)")
    response = _response_from_json(item, where)
    return _delayed(response, float(delay)) if delay else response


def _delayed(response: ModelResponse, delay_s: float) -> Step:
    def step(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        pause(delay_s)  # stands in for a slow model
        return response

    return step


def pause(seconds: float) -> None:
    """A slow model's wait. Made on the run's own thread (`Interrupt.call(here=True)`), it
    ends when the run's switch is thrown, and raises Interrupted."""
    switch = interrupt.current()
    if switch is None:
        time.sleep(seconds)
    elif switch.wait(seconds):
        switch.check()


def _response_from_json(item: dict[str, Any], where: str) -> ModelResponse:
    content, reasoning = item.get("text"), item.get("reasoning")
    if content is not None and not isinstance(content, str):
        raise FatalModelError(f"{where}: 'text' must be a string")
    if reasoning is not None and not isinstance(reasoning, str):
        raise FatalModelError(f"{where}: 'reasoning' must be a string")
    calls = item.get("tool_calls") or []
    if not isinstance(calls, list) or not all(_is_call(call) for call in calls):
        raise FatalModelError(f"{where}: 'tool_calls' must be a list of {{name, arguments}}")
    if not calls:
        return text(content or "", reasoning=reasoning)
    return tool_calls([(call["name"], call.get("arguments", {})) for call in calls],
                      text=content, reasoning=reasoning)


def _is_call(call: Any) -> bool:
    return (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments", {}), dict | str)
    )


# --- the built-in `demo` script: follows the worker protocol -----------------------------


def demo_steps() -> list[Step]:
    """Show the card, say it is starting, heartbeat, complete it from its goal, sign off."""
    return [
        tool_call("kanban_show"),
        tool_call("kanban_comment", body="Starting work on this card."),
        _heartbeat,
        _complete,
        text("Card complete."),
    ]


def _heartbeat(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    title = shown_card(messages).get("title")
    note = f"Working on: {title}" if isinstance(title, str) and title else "Working on the card."
    return tool_call("kanban_heartbeat", note=note)


def _complete(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    card = shown_card(messages)
    goal, title = card.get("goal"), card.get("title")
    if isinstance(goal, str) and goal.strip():
        summary = f"Done: {_first_line(goal)}"
    elif isinstance(title, str) and title.strip():
        summary = f"Done: {_first_line(title)}"
    else:
        summary = "Done: worked through the card (its goal could not be read)."
    return tool_calls([("kanban_complete", {"summary": summary})], text="Completing the card.")


def shown_card(messages: Sequence[Message]) -> dict[str, Any]:
    """The card from the latest successful kanban_show result, or {} when there is none."""
    show_ids = {
        call.id for m in messages for call in m.tool_calls if call.name == "kanban_show"
    }
    for message in reversed(messages):
        if message.role == "tool" and message.tool_call_id in show_ids and not message.is_error:
            return _card_of(message.content or "")
    return {}


def _card_of(content: str) -> dict[str, Any]:
    try:
        data = json.loads(content)
    except ValueError:
        return {}
    if isinstance(data, dict) and isinstance(data.get("card"), dict) and "goal" not in data:
        data = data["card"]
    return data if isinstance(data, dict) else {}


def _first_line(value: str, limit: int = 200) -> str:
    line = value.strip().splitlines()[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


register_script("demo", demo_steps)


def slowed(steps: Iterable[Step], delay_s: float) -> list[Step]:
    """The same steps, each answered after `delay_s` (to watch a demo unfold)."""

    def slow(step: Step) -> Step:
        def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
            pause(delay_s)
            return step(messages, tools) if callable(step) else step

        return answer

    return [slow(step) for step in steps]


register_script("demo-slow", lambda: slowed(demo_steps(), 0.6))


# --- the built-in `lead-demo` script: splits a goal and delegates it ------------------------


def lead_demo_steps() -> list[Step]:
    """Delegate research, outline, draft (after both) and review (after the draft); answer."""
    return [_delegate_goal, _answer_from_children]


def _delegate_goal(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    goal = _first_line(_goal_of(messages) or "the goal")
    tasks = [
        {"title": f"Research: {goal}"[:200], "goal": f"Collect the facts needed for: {goal}"},
        {"title": f"Outline: {goal}"[:200], "goal": f"Propose a structure for: {goal}"},
        {"title": f"Draft: {goal}"[:200], "goal": f"Write a draft of: {goal}", "after": [0, 1]},
    ]
    return tool_calls([("delegate", {"tasks": tasks})], text="Splitting the goal in three.")


def _answer_from_children(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    children = _delegated_children(messages)
    if not children:
        return text("I could not delegate the work, so I have no answer.")
    lines = [f"Answer for: {_first_line(_goal_of(messages) or 'the goal')}"]
    for child in children:
        outcome = child.get("summary") or child.get("error") or child.get("status")
        lines.append(f"- #{child.get('id')} {child.get('title')}: {outcome}")
    return text("\n".join(lines))


def _goal_of(messages: Sequence[Message]) -> str | None:
    for message in messages:
        if message.role == "user" and message.content:
            return message.content.removeprefix("Goal:").strip()
    return None


def _delegated_children(messages: Sequence[Message]) -> list[dict[str, Any]]:
    for message in reversed(messages):
        if message.role == "tool" and not message.is_error:
            try:
                data = json.loads(message.content or "")
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("children"), list):
                return [c for c in data["children"] if isinstance(c, dict)]
    return []


register_script("lead-demo", lead_demo_steps)


# --- the built-in `demo-writer` script: a worker that leaves its result in a file ----------


def demo_writer_steps() -> list[Step]:
    """Show the card, write `<first word of the title>.md` in the workspace from its goal and
    its dependencies' results, count its words with the terminal, complete naming the file."""
    return [tool_call("kanban_show"), _write_result, _count_words, _complete_with_file,
            text("Card complete.")]


def _result_file(messages: Sequence[Message]) -> str:
    title = str(shown_card(messages).get("title") or "result")
    word = "".join(ch for ch in title.split(":")[0].split()[0].lower() if ch.isalnum())
    return f"{word or 'result'}.md"


def _write_result(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    card = shown_card(messages)
    lines = [f"# {card.get('title') or 'Result'}", "", str(card.get("goal") or "")]
    for dep in card.get("dependencies") or []:
        if isinstance(dep, dict) and dep.get("result"):
            lines += ["", f"## From #{dep.get('id')} {dep.get('title')}", str(dep["result"])]
    return tool_call("write_file", path=_result_file(messages), content="\n".join(lines) + "\n")


def _count_words(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
    if not any(t.name == "terminal" for t in tools):
        return tool_call("read_file", path=_result_file(messages))
    return tool_call("terminal", command=f"wc -w < {_result_file(messages)}")


def _complete_with_file(messages: Sequence[Message],
                        tools: Sequence[ToolSpec]) -> ModelResponse:
    output = next((m.content or "" for m in reversed(messages) if m.role == "tool"), "")
    words = next((w for w in reversed(output.split()) if w.isdigit()), None)
    counted = f" ({words} words)" if words else ""
    return tool_call("kanban_complete",
                     summary=f"Wrote {_result_file(messages)}{counted} in my workspace.")


register_script("demo-writer", demo_writer_steps)
register_script("demo-writer-slow", lambda: slowed(demo_writer_steps(), 0.4))
