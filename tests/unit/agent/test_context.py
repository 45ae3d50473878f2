"""Context management: where the middle is cut, compression past the threshold and on a
provider's overflow error, oversized results cut and paged back from disk."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kanban.agent import (
    AgentHooks,
    ContextOverflowError,
    ContextPolicy,
    Message,
    ModelResponse,
    SavedOutputs,
    ScriptedModel,
    StopReason,
    ToolResult,
    ToolSpec,
    run_agent,
    text,
    tool_call,
    tool_calls,
)
from kanban.agent.context import (
    SUMMARY_NAME,
    SUMMARY_PREFIX,
    SUMMARY_SYSTEM,
    split_points,
)
from kanban.agent.outputs import READ_TOOL, SAVED_DIR
from kanban.agent.types import ToolCall
from kanban.tools.registry import Toolbox
from tests.unit.agent.helpers import make_tool


def turn(i: int, calls: int) -> list[Message]:
    ids = [f"c{i}_{n}" for n in range(calls)]
    assistant = Message("assistant", f"step {i}", tool_calls=tuple(
        ToolCall(cid, "echo", "{}") for cid in ids))
    return [assistant, *(Message("tool", "x" * 50, tool_call_id=cid, name="echo") for cid in ids)]


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12),
       st.integers(min_value=0, max_value=2_000))
def test_the_cut_never_separates_a_call_from_its_results(shape: list[int], keep: int) -> None:
    messages = [Message("system", "sys"), Message("user", "task")]
    for i, calls in enumerate(shape):
        messages += turn(i, calls) if calls else [Message("user", f"note {i}")]
    points = split_points(messages, keep)
    if points is None:
        return
    head, tail = points
    assert head == 2 and head < tail <= len(messages)
    kept = messages[tail:]
    assert not kept or kept[0].role != "tool"
    answered = {m.tool_call_id for m in kept if m.role == "tool"}
    called = {c.id for m in kept for c in m.tool_calls}
    assert answered <= called  # no result whose call was summarised away


class Agent:
    """A scripted model that answers summary requests whenever they come, and otherwise
    echoes `work` times before it finishes; `fail` raises on chosen work calls."""

    def __init__(self, work: int, summary: str = "earlier steps summarised",
                 fail: dict[int, Exception] | None = None) -> None:
        self.work, self.summary, self.fail = work, summary, fail or {}
        self.calls = 0
        self.summaries: list[str] = []

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        if messages[0].content == SUMMARY_SYSTEM:
            assert tools == ()
            self.summaries.append(messages[1].content or "")
            return text(self.summary)
        self.calls += 1
        if self.calls in self.fail:
            raise self.fail.pop(self.calls)
        if self.calls <= self.work:
            return tool_call("echo", text=f"step {self.calls} ")
        return text("finished")

    def model(self) -> ScriptedModel:
        return ScriptedModel([self] * 40)


class Notes(AgentHooks):
    def __init__(self) -> None:
        self.compressed: list[tuple[Message, int, int]] = []
        self.stored: list[Message] = []

    def on_message(self, message: Message) -> None:
        self.stored.append(message)

    def on_compress(self, summary: Message, replaced: int, tokens_before: int) -> None:
        self.compressed.append((summary, replaced, tokens_before))


def echo_box() -> Toolbox:
    return Toolbox([make_tool("echo", lambda args: args.get("text", "") * 40,
                              properties={"text": {"type": "string"}})])


def test_past_the_threshold_the_middle_is_summarised() -> None:
    agent = Agent(work=6, summary="did some steps; results were all echoes")
    model = agent.model()
    notes = Notes()
    result = run_agent(model, system="sys", prompt="the task", toolbox=echo_box(), hooks=notes,
                       context=ContextPolicy(window=800, compress_at=0.5, keep_recent=0.2))
    assert result.stop_reason is StopReason.COMPLETED and result.text == "finished"
    assert result.compressions >= 1 and agent.summaries
    assert "step 1" in agent.summaries[0]  # the middle went to the summariser as text
    (summary, replaced, before), *_ = notes.compressed
    assert summary.name == SUMMARY_NAME and summary.role == "user"
    assert summary.content == SUMMARY_PREFIX + "did some steps; results were all echoes"
    assert replaced >= 2 and before > 400
    assert summary in notes.stored  # the transcript records the summary too
    after = next(c.messages for c in model.calls if summary in c.messages)
    assert [m.content for m in after[:2]] == ["sys", "the task"]
    assert after[2] == summary
    assert after[3].role == "assistant"  # the kept tail starts with a call, not a result
    assert max(len(c.messages) for c in model.calls) < 2 + 2 * 6


def test_an_overflow_error_compresses_and_retries_once() -> None:
    overflow = ContextOverflowError("openai: HTTP 400: maximum context length exceeded")
    agent = Agent(work=2, fail={3: overflow})
    result = run_agent(agent.model(), system="sys", prompt="task", toolbox=echo_box(),
                       context=ContextPolicy(window=1_000_000))
    assert result.stop_reason is StopReason.COMPLETED and result.text == "finished"
    assert result.compressions == 1 and result.turns == 3 and len(agent.summaries) == 1
    assert any(m.name == SUMMARY_NAME for m in result.messages)


def test_a_second_overflow_fails_the_run() -> None:
    agent = Agent(work=2, fail={3: ContextOverflowError("x"),
                                4: ContextOverflowError("anthropic: prompt is too long")})
    result = run_agent(agent.model(), system="sys", prompt="task", toolbox=echo_box())
    assert result.stop_reason is StopReason.ERROR and not result.fatal
    assert result.error == "anthropic: prompt is too long"


def test_an_overflow_with_nothing_to_compress_fails() -> None:
    agent = Agent(work=0, fail={1: ContextOverflowError("openai: too long")})
    result = run_agent(agent.model(), system="s", prompt="t", toolbox=echo_box())
    assert result.stop_reason is StopReason.ERROR and result.error == "openai: too long"
    assert agent.summaries == []


def test_an_oversized_result_is_cut_saved_and_paged(tmp_path: Path) -> None:
    big = "".join(f"line {i:06d}\n" for i in range(100_000))  # 1.2 MB
    dump = make_tool("dump", lambda args: big)

    def page(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        note = messages[-1].content or ""
        path = note.split("saved as ", 1)[1].split(" ", 1)[0]
        return tool_calls([(READ_TOOL, {"path": path, "offset": 120_000, "limit": 36})])

    model = ScriptedModel([tool_call("dump"), page, text("read it")])
    outputs = SavedOutputs(tmp_path, cap=4_000)
    result = run_agent(model, system="s", prompt="t", toolbox=Toolbox([dump]), outputs=outputs)
    assert READ_TOOL in [t.name for t in model.calls[0].tools]
    cut, paged = [m.content or "" for m in result.messages if m.role == "tool"]
    assert len(cut) <= 4_000 and cut.startswith("line 000000") and cut.endswith("line 099999\n")
    assert "1,200,000 characters" in cut and READ_TOOL in cut
    (saved,) = (tmp_path / SAVED_DIR).iterdir()
    assert saved.read_text() == big
    assert paged.endswith("\n" + big[120_000:120_036])
    assert "characters 120,000-120,036 of 1,200,000" in paged


def test_reading_saved_output_stays_in_its_folder(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("keep out")
    outputs = SavedOutputs(tmp_path, cap=2_000)

    def read(path: str, **extra: Any) -> Any:
        return outputs.read(ToolCall("c", READ_TOOL, json.dumps({"path": path, **extra})))

    for path in ("../secret.txt", "/etc/passwd", f"{SAVED_DIR}/../secret.txt", "secret.txt"):
        result = read(path)
        assert result.is_error and "no saved output" in result.content
    assert read("x", offset=-1).is_error
    assert outputs.read(ToolCall("c", READ_TOOL, "{broken")).is_error


def test_a_planted_saved_output_folder_link_is_neither_read_nor_written(
        tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "id_rsa").write_text("keep out")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / SAVED_DIR).symlink_to(outside)  # planted by a command of the card
    outputs = SavedOutputs(workspace, cap=1_000)
    result = outputs.read(ToolCall("c", READ_TOOL, json.dumps({"path": "id_rsa"})))
    assert result.is_error and "keep out" not in result.content
    bounded = outputs.bound(ToolCall("c", "t", "{}"), ToolResult("y" * 5000))
    assert "could not be saved" in bounded.content
    assert [p.name for p in outside.iterdir()] == ["id_rsa"]


def test_without_a_folder_results_are_still_cut() -> None:
    outputs = SavedOutputs(None, cap=1_000)
    bounded = outputs.bound(ToolCall("c", "t", "{}"), ToolResult("y" * 5000))
    assert len(bounded.content) <= 1_000 and "could not be saved" in bounded.content
    assert outputs.spec is None
