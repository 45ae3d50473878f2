"""Rows 7: the agent loop. Its overhead per turn with the scripted model, streaming through
the real SDKs against the local LLM server, parallel tool calls, how soon a tool shows as
the worker's live activity, and how soon a cancel stops a streaming call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bench.common import Sizes, kanban_at, median, new_board, percentile
from bench.report import Goal, Row


@dataclass(frozen=True)
class AgentSizes:
    turns: int  # per timed run of the loop
    runs: int
    stream_chars: int  # one streamed answer
    parallel_calls: int
    nap_s: float
    samples: int  # activity and cancel latencies


SIZES = {
    "full": AgentSizes(turns=200, runs=7, stream_chars=200_000, parallel_calls=8, nap_s=0.2,
                       samples=15),
    "quick": AgentSizes(turns=100, runs=3, stream_chars=60_000, parallel_calls=8, nap_s=0.1,
                        samples=5),
    "smoke": AgentSizes(turns=5, runs=1, stream_chars=400, parallel_calls=2, nap_s=0.01,
                        samples=1),
}


def run(sizes: Sizes, work: Path) -> list[Row]:
    size = SIZES.get(sizes.name, SIZES["full"])
    work.mkdir(parents=True, exist_ok=True)
    return [*loop_overhead(size), *streaming(size), parallel_tools(size),
            activity_latency(size, work / "activity"), cancel_latency(size, work / "cancel")]


# --- 7.1-7.2: the loop's own cost per turn ------------------------------------------------


def loop_overhead(size: AgentSizes) -> list[Row]:
    from kanban.agent import Interrupt

    _loop_ms(size, None), _bare_ms(size)  # warm-up
    plain = median(_loop_ms(size, None) for _ in range(size.runs))
    hopped = median(_loop_ms(size, Interrupt()) for _ in range(size.runs))
    bare = median(_bare_ms(size) for _ in range(size.runs))
    label = "the same model and tool calls without the loop"
    return [
        Row("7.1", f"loop time per turn, scripted model, {size.turns} turns", "ms", plain,
            bare, label, Goal("value", "<=", 1.0, "ms"),
            "run_agent with limits, budget warnings, context gauge, hooks and the tool "
            "executor; the baseline calls ScriptedModel.complete and Toolbox.call directly"),
        Row("7.2", "loop time per turn with an interrupt (as workers run)", "ms", hopped, bare,
            label, Goal("value", "<=", 1.0, "ms"),
            "each model call runs on a helper thread so a cancel can abandon it at once"),
    ]


def _echo_toolbox() -> Any:
    from kanban.tools import Tool, Toolbox

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return Toolbox([Tool("echo", "Echo", schema, lambda args: args.get("text", ""), "bench")])


def _script(size: AgentSizes) -> Any:
    """Steps with their usage given, so the model does not estimate it from the text."""
    from dataclasses import replace

    from kanban.agent import ScriptedModel, Usage, text, tool_call

    used = Usage(1_000, 20)
    steps = [replace(tool_call("echo", text="x"), usage=used) for _ in range(size.turns)]
    return ScriptedModel([*steps, replace(text("done"), usage=used)])


def _loop_ms(size: AgentSizes, interrupt: Any) -> float:
    from kanban.agent import Limits, run_agent

    model, toolbox = _script(size), _echo_toolbox()
    started = time.perf_counter()
    result = run_agent(model, system="bench", prompt="go", toolbox=toolbox,
                       limits=Limits(max_turns=size.turns + 1), interrupt=interrupt)
    elapsed = time.perf_counter() - started
    if result.turns != size.turns + 1:
        raise RuntimeError(f"the scripted run took {result.turns} turns")
    return elapsed * 1000 / result.turns


def _bare_ms(size: AgentSizes) -> float:
    from kanban.agent import Message

    model, toolbox = _script(size), _echo_toolbox()
    tools = toolbox.specs()
    messages = [Message("system", "bench"), Message("user", "go")]
    started = time.perf_counter()
    for _ in range(size.turns + 1):
        response = model.complete(messages, tools)
        messages.append(Message("assistant", response.text, tool_calls=response.tool_calls))
        for call in response.tool_calls:
            result = toolbox.call(call)
            messages.append(Message("tool", result.content, tool_call_id=call.id))
    return (time.perf_counter() - started) * 1000 / (size.turns + 1)


# --- 7.3-7.5: streaming through the SDKs --------------------------------------------------


def streaming(size: AgentSizes) -> list[Row]:
    from tests.support.llm_server import LLMServer, text_reply

    rows = []
    reply = text_reply("token " * (size.stream_chars // 6), chunk_chars=6)
    with LLMServer(responder=lambda body: reply) as server:
        for key, wire in (("7.3", "openai"), ("7.4", "anthropic"),
                          ("7.5", "openai-responses")):
            _stream_rate(server, wire), _raw_rate(server, wire)  # warm both paths up
            pairs = [(_stream_rate(server, wire), _raw_rate(server, wire))
                     for _ in range(size.runs)]
            ours, raw = median(p[0] for p in pairs), median(p[1] for p in pairs)
            rows.append(Row(key, f"streamed deltas/s through the {wire} adapter "
                            f"({size.stream_chars // 6:,} deltas per answer)", "/s", ours, raw,
                            "the same stream iterated with the bare SDK", None,
                            "local server on loopback; the adapter assembles the answer and "
                            "tells a listener of every delta, as workers do"))
    return rows


def _stream_rate(server: Any, wire: str) -> float:
    from kanban.agent import Message, resolve_model

    model = resolve_model(f"{wire}:bench", env=server.env())
    deltas = [0]

    def count(event: object) -> None:
        deltas[0] += 1

    started = time.perf_counter()
    model.stream([Message("user", "talk")], [], count)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    model.close()  # type: ignore[attr-defined]
    return deltas[0] / elapsed


def _raw_rate(server: Any, wire: str) -> float:
    import anthropic
    import openai

    events = 0
    started = time.perf_counter()
    if wire == "anthropic":
        client: Any = anthropic.Anthropic(api_key="k", base_url=server.url, max_retries=0)
        stream = client.messages.create(model="bench", max_tokens=10, stream=True,
                                        messages=[{"role": "user", "content": "talk"}])
    elif wire == "openai":
        client = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
        stream = client.chat.completions.create(model="bench", stream=True,
                                                messages=[{"role": "user", "content": "talk"}])
    else:
        client = openai.OpenAI(api_key="k", base_url=server.openai_base_url, max_retries=0)
        stream = client.responses.create(model="bench", input="talk", stream=True)
    with stream:
        for _ in stream:
            events += 1
    elapsed = time.perf_counter() - started
    client.close()
    return events / elapsed


# --- 7.6: parallel tool calls -------------------------------------------------------------


def parallel_tools(size: AgentSizes) -> Row:
    from kanban.agent import Limits, ScriptedModel, run_agent, text, tool_calls
    from kanban.tools import Tool, Toolbox

    def rest(args: dict[str, Any]) -> str:
        time.sleep(size.nap_s)  # stands in for a slow tool
        return "rested"

    nap = Tool("nap", "Sleep", {"type": "object", "properties": {}}, rest, "bench")

    def turn_s(parallel: int) -> float:
        model = ScriptedModel([tool_calls([("nap", {})] * size.parallel_calls), text("ok")])
        started = time.perf_counter()
        run_agent(model, system="", prompt="nap", toolbox=Toolbox([nap]),
                  limits=Limits(max_parallel=parallel))
        return time.perf_counter() - started

    together = median(turn_s(size.parallel_calls) for _ in range(size.runs))
    alone = median(turn_s(1) for _ in range(size.runs))
    return Row("7.6", f"wall time of a turn of {size.parallel_calls} tool calls sleeping "
               f"{size.nap_s:g} s each", "s", together, alone, "the same calls one at a time",
               Goal("ratio", "<=", 1.5 / size.parallel_calls),
               "calls of parallel-safe tools run in a bounded pool; results in call order")


# --- 7.7-7.8: live activity and cancel latency --------------------------------------------


def activity_latency(size: AgentSizes, work: Path) -> Row:
    """Tool start → the run row names the tool, through the worker's watch thread."""
    from kanban.worker.activity import Activity

    samples: list[float] = []
    for _ in range(size.samples):
        with _claimed(work) as (kb, scope):
            activity = Activity(max_turns=5)
            watch = _watch(scope, activity)
            started = time.perf_counter()
            activity.tool_started("terminal")
            _wait(lambda: "terminal" in (_activity(kb, scope.run_id) or ""))
            samples.append((time.perf_counter() - started) * 1000)
            watch.stop()
    return Row("7.7", "tool start → shown as the run's activity (p50)", "ms",
               percentile(samples, 50), percentile(samples, 95), "p95 of the same", Goal(
                   "value", "<=", 1000, "ms"),
               "the watch thread writes a phase change at once and streamed counters at most "
               "once a second; `kanban board --watch` redraws on the commit")


def cancel_latency(size: AgentSizes, work: Path) -> Row:
    """`cancel` → the worker hangs up on the model's stream (local server, in process)."""
    from kanban.agent import Interrupt, Limits, resolve_model, run_agent
    from kanban.tools import Toolbox
    from kanban.worker.activity import Activity
    from tests.support.llm_server import LLMServer, text_reply

    samples: list[float] = []
    slow = text_reply("word " * 4000, chunk_chars=5, chunk_delay=0.02)
    with LLMServer(responder=lambda body: slow) as server:
        for _ in range(size.samples):
            before: int = server.aborted
            with _claimed(work) as (kb, scope):
                interrupt = Interrupt()
                watch = _watch(scope, Activity(max_turns=2), interrupt)
                model = resolve_model("openai:bench", env=server.env())
                runner = threading.Thread(target=run_agent, args=(model,), kwargs={
                    "system": "", "prompt": "talk", "toolbox": Toolbox([]),
                    "limits": Limits(max_turns=1), "interrupt": interrupt}, daemon=True)
                runner.start()
                _wait(lambda: len(server.requests) > len(samples))
                started = time.perf_counter()
                kb.cancel(scope.card_id, reason="bench")
                _wait(partial(_more_than, server, before))
                samples.append((time.perf_counter() - started) * 1000)
                runner.join(10)
                watch.stop()
    return Row("7.8", "cancel → the streaming call stopped (p50)", "ms", percentile(samples, 50),
               percentile(samples, 95), "p95 of the same", Goal("value", "<=", 1000, "ms"),
               "the watch thread checks the lease every 0.25 s and throws the interrupt; the "
               "loop abandons the call and the client hangs up")


class _claimed:
    """A board with one claimed card, as a worker holds it."""

    count = 0

    def __init__(self, work: Path) -> None:
        _claimed.count += 1
        self.path = work / f"{_claimed.count}" / "kanban.db"

    def __enter__(self) -> tuple[Any, Any]:
        from kanban.cards import NewCard
        from kanban.tools.scope import WorkerScope

        new_board(self.path)
        self.kb_context = kanban_at(self.path)
        kb = self.kb_context.__enter__()
        kb.add_card(NewCard(title="bench", board="default"))
        claim = kb.claim(1, lease_s=30)[0]
        scope = WorkerScope(kb, "default", claim.card_id, claim.claim_token, claim.run_id)
        return kb, scope

    def __exit__(self, *exc: Any) -> None:
        self.kb_context.__exit__(*exc)


def _watch(scope: Any, activity: Any, interrupt: Any = None) -> Any:
    from kanban.worker.heartbeat import HeartbeatThread

    watch = HeartbeatThread(scope, activity=activity, interrupt=interrupt)
    watch.start()
    return watch


def _more_than(server: Any, before: int) -> bool:
    return bool(server.aborted > before)


def _activity(kb: Any, run_id: int) -> str | None:
    with kb.db.read() as conn:
        return conn.scalar("SELECT activity FROM run WHERE id = :id", {"id": run_id})


def _wait(done: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("bench: a state was not reached in time")
        time.sleep(0.002)
