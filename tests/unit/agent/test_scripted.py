"""ScriptedModel, script registration, JSON-file scripts and the demo script."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from kanban.agent import (
    FatalModelError,
    Message,
    ModelResponse,
    ScriptedModel,
    StopReason,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    register_script,
    resolve_model,
    run_agent,
    text,
    tool_call,
    tool_calls,
)
from kanban.agent.scripted import FINISHED_TEXT, estimate_usage
from kanban.agent.scripts import shown_card, steps_from_json
from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import make_tool

HELLO = [Message("user", "hello")]


def test_steps_replay_in_order_and_calls_are_recorded() -> None:
    model = ScriptedModel([text("one")])
    model.enqueue(tool_call("echo", text="two"), text("three"))
    tools = [ToolSpec("echo", "echo", {"type": "object"})]
    replies = [model.complete(HELLO, tools) for _ in range(3)]
    assert [r.text for r in replies] == ["one", None, "three"]
    assert replies[1].tool_calls[0].name == "echo"
    assert json.loads(replies[1].tool_calls[0].arguments) == {"text": "two"}
    assert len(model.calls) == 3
    assert model.calls[0].messages == tuple(HELLO) and model.calls[0].tools == tuple(tools)
    model.assert_consumed()


def test_script_finished_text_when_steps_run_out() -> None:
    model = ScriptedModel()
    assert model.complete(HELLO, []).text == FINISHED_TEXT


def test_assert_consumed_names_the_leftover_steps() -> None:
    model = ScriptedModel([text("used"), tool_call("kanban_show"), text("left over")])
    model.complete(HELLO, [])
    with pytest.raises(AssertionError, match=r"2 step\(s\) not consumed") as info:
        model.assert_consumed()
    assert "tool_calls(kanban_show)" in str(info.value)
    assert "'left over'" in str(info.value)


def test_tool_call_ids_are_deterministic_and_unique() -> None:
    model = ScriptedModel([tool_calls([("a", {}), ("b", {})]), tool_call("a")])
    first, second = model.complete(HELLO, []), model.complete(HELLO, [])
    assert [c.id for c in first.tool_calls] == ["call_1_1", "call_1_2"]
    assert [c.id for c in second.tool_calls] == ["call_2_1"]


def test_explicit_ids_usage_and_model_are_kept() -> None:
    step = ModelResponse("hi", usage=Usage(7, 3, 2), model="custom")
    reply = ScriptedModel([step]).complete(HELLO, [])
    assert reply.usage == Usage(7, 3, 2) and reply.model == "custom"


def test_usage_is_estimated_from_characters() -> None:
    messages = [Message("user", "x" * 40)]
    usage = estimate_usage(messages, [], text("y" * 9))
    assert usage == Usage(input_tokens=10, output_tokens=3)
    reply = ScriptedModel([text("y" * 9)], name="scripted:u").complete(messages, [])
    assert reply.usage == usage and reply.model == "scripted:u"


def test_callable_steps_derive_output_from_the_conversation() -> None:
    def shout(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        return text((messages[-1].content or "").upper())

    assert ScriptedModel([shout]).complete(HELLO, []).text == "HELLO"


def test_a_callable_step_must_return_a_model_response() -> None:
    model = ScriptedModel([lambda messages, tools: "oops"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="not ModelResponse"):
        model.complete(HELLO, [])


def test_raw_string_arguments_are_sent_as_is() -> None:
    reply = ScriptedModel([tool_calls([("a", "{broken")])]).complete(HELLO, [])
    assert reply.tool_calls[0].arguments == "{broken"


def test_registered_scripts_resolve_through_the_spec() -> None:
    register_script("unit-greeting", lambda: [text("greetings")])
    model = resolve_model("scripted:unit-greeting", env={})
    assert isinstance(model, ScriptedModel)
    assert model.name == "scripted:unit-greeting"
    assert model.complete(HELLO, []).text == "greetings"


def test_a_script_factory_may_return_a_model() -> None:
    register_script("unit-model", lambda: ScriptedModel([text("made")]))
    model = resolve_model("scripted:unit-model", env={})
    assert model.name == "scripted:unit-model"
    assert model.complete(HELLO, []).text == "made"


def test_unknown_script_is_fatal_and_lists_known_ones() -> None:
    with pytest.raises(FatalModelError, match=r"unknown script 'nope'.*demo"):
        resolve_model("scripted:nope", env={})


def test_json_file_scripts(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    steps = [
        {"tool_calls": [{"name": "kanban_show", "arguments": {}}]},
        {
            "text": "thinking",
            "tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "s"}}],
        },
        {"text": "bye"},
    ]
    script.write_text(json.dumps(steps))
    model = resolve_model(f"scripted:{script}", env={})
    replies = [model.complete(HELLO, []) for _ in range(3)]
    assert replies[0].tool_calls[0].name == "kanban_show"
    assert replies[1].text == "thinking"
    assert json.loads(replies[1].tool_calls[0].arguments) == {"summary": "s"}
    assert replies[2].text == "bye"
    assert model.name == f"scripted:{script}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"text": "x"}, "must be a JSON list"),
        (["x"], r"\[0\]: a step needs"),
        ([{"text": 3}], "'text' must be a string"),
        ([{"tool_calls": [{"arguments": {}}]}], "'tool_calls' must be a list"),
    ],
)
def test_bad_json_scripts_are_fatal(data: object, message: str) -> None:
    with pytest.raises(FatalModelError, match=message):
        steps_from_json(data)


def test_unreadable_json_script_is_fatal(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(FatalModelError, match="cannot read script file"):
        resolve_model(f"scripted:{tmp_path / 'bad.json'}", env={})
    with pytest.raises(FatalModelError, match="cannot read script file"):
        resolve_model(f"scripted:{tmp_path / 'missing.json'}", env={})


# --- the demo script -------------------------------------------------------------------


def worker_toolbox(card_text: str, calls: list[tuple[str, dict]]) -> Toolbox:
    def recorder(name: str, answer: str) -> Callable[[dict], ToolResult]:
        def handle(args: dict) -> ToolResult:
            calls.append((name, args))
            return ToolResult(answer)

        return handle

    return Toolbox(
        [
            make_tool("kanban_show", recorder("kanban_show", card_text)),
            make_tool("kanban_comment", recorder("kanban_comment", "commented"),
                      properties={"body": {"type": "string"}}, required=["body"]),
            make_tool("kanban_heartbeat", recorder("kanban_heartbeat", "ok"),
                      properties={"note": {"type": "string"}}),
            make_tool("kanban_complete", recorder("kanban_complete", "done"),
                      properties={"summary": {"type": "string"}}, required=["summary"]),
        ]
    )


def test_demo_script_follows_the_worker_protocol() -> None:
    card = {"id": 7, "title": "Write the README", "goal": "Explain how to install kanban."}
    calls: list[tuple[str, dict]] = []
    model = resolve_model("scripted:demo", env={})
    result = run_agent(
        model, system="worker", prompt="card 7", toolbox=worker_toolbox(json.dumps(card), calls)
    )
    assert [name for name, _ in calls] == [
        "kanban_show",
        "kanban_comment",
        "kanban_heartbeat",
        "kanban_complete",
    ]
    assert calls[0][1] == {}
    assert calls[2][1] == {"note": "Working on: Write the README"}
    assert calls[3][1] == {"summary": "Done: Explain how to install kanban."}
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "Card complete."
    assert isinstance(model, ScriptedModel)
    model.assert_consumed()


@pytest.mark.parametrize(
    ("shown", "summary"),
    [
        ("not json at all", "Done: worked through the card (its goal could not be read)."),
        (json.dumps({"title": "Only a title"}), "Done: Only a title"),
        (json.dumps({"card": {"goal": "Nested goal\nsecond line"}}), "Done: Nested goal"),
        (json.dumps(["a", "list"]), "Done: worked through the card (its goal could not be read)."),
    ],
)
def test_demo_script_is_tolerant_of_what_kanban_show_returns(shown: str, summary: str) -> None:
    calls: list[tuple[str, dict]] = []
    run_agent(
        resolve_model("scripted:demo", env={}),
        system="",
        prompt="go",
        toolbox=worker_toolbox(shown, calls),
    )
    assert calls[3] == ("kanban_complete", {"summary": summary})


def test_shown_card_ignores_error_results() -> None:
    messages = [
        Message("assistant", None, tool_calls=(ToolCall("c1", "kanban_show", "{}"),)),
        Message("tool", '{"goal": "g"}', tool_call_id="c1", name="kanban_show", is_error=True),
    ]
    assert shown_card(messages) == {}


def test_demo_script_ends_when_kanban_complete_ends_the_run() -> None:
    card = json.dumps({"title": "t", "goal": "g"})
    tools = [
        make_tool("kanban_show", lambda args: card),
        make_tool("kanban_comment", lambda args: "ok", properties={"body": {"type": "string"}}),
        make_tool("kanban_heartbeat", lambda args: "ok", properties={"note": {"type": "string"}}),
        make_tool(
            "kanban_complete",
            lambda args: ToolResult("card done", ends_run=True),
            properties={"summary": {"type": "string"}},
        ),
    ]
    result = run_agent(
        resolve_model("scripted:demo", env={}), system="", prompt="go", toolbox=Toolbox(tools)
    )
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "Completing the card."
    assert result.turns == 4


def test_a_resumed_conversation_continues_the_script() -> None:
    from kanban.agent.fallback import FallbackModel
    from kanban.agent.scripted import resume_scripts

    model = ScriptedModel([text("one"), tool_calls([("kanban_heartbeat", {})]), text("three")])
    resume_scripts(FallbackModel([model]), 2)  # two stored answers: the third step is next
    convo = [Message("user", "go"), Message("assistant", "one"), Message("user", "again")]
    reply = model.complete(convo, ())
    assert reply.text == "three" and model.remaining == ()
    fresh = ScriptedModel([tool_calls([("kanban_heartbeat", {})])])
    fresh.resume(3)
    assert fresh.remaining == ()
    resumed_ids = ScriptedModel([tool_calls([("a", {})])])
    resumed_ids.resume(0)
    assert resumed_ids.complete(convo, ()).tool_calls[0].id == "call_1_1"
    later = ScriptedModel([text("x"), tool_calls([("a", {})])])
    later.resume(1)  # ids stay unique within the resumed conversation
    assert later.complete(convo, ()).tool_calls[0].id == "call_2_1"


def test_a_json_scripts_slow_step_runs_on_the_runs_thread_and_stops_with_it(
        tmp_path: Path) -> None:
    """A JSON script can block only in its delays, which watch the run's switch: its calls
    need no helper thread, and a cancel ends a 30 s delay at once."""
    import threading

    from kanban.agent.fallback import call_model
    from kanban.agent.interrupt import Interrupt, Interrupted
    from kanban.agent.scripts import load_script

    script = tmp_path / "slow.json"
    script.write_text(json.dumps([{"text": "quick"}, {"text": "late", "delay_s": 30}]))
    model = load_script(str(script))
    assert model.interruptible
    switch = Interrupt()
    here = switch.call(lambda: (call_model(model, [], [], None), threading.get_ident()),
                       here=model.interruptible)
    assert here[0].text == "quick" and here[1] == threading.get_ident()
    threading.Timer(0.05, switch.cancel, args=("card cancelled",)).start()
    with pytest.raises(Interrupted, match="card cancelled"):
        switch.call(lambda: call_model(model, [], [], None), here=True)
    assert switch._caller is None  # no helper thread was ever made


def test_a_registered_script_may_block_anywhere_so_it_keeps_a_helper_thread() -> None:
    from kanban.agent.scripts import load_script

    assert load_script("demo").interruptible is False
