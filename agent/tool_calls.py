"""Running one turn's tool calls: concurrently where the tools allow it, answered in order.

Calls of tools that are `parallel` run together in a bounded pool; the others run one at
a time afterwards, and `exclusive` ones (finishing a card, say) run last and alone. Each
call passes the `pre_tool` hooks (which may veto it), the toolbox, the `post_tool` hooks,
and the size cap, in that order.
"""

from __future__ import annotations

import concurrent.futures as futures
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from kanban.agent.interrupt import Interrupt
from kanban.agent.outputs import READ_TOOL, SavedOutputs
from kanban.agent.tracing import NO_TRACE, RunTrace
from kanban.agent.types import Toolbox, ToolCall, ToolResult, ToolSpec
from kanban.agent.user_hooks import UserHooks

DEFAULT_PARALLEL = 8
DEFAULT_TOOL_CALLS = 64  # per turn; the rest are answered with an error
DEFAULT_ARGUMENT_CHARS = 1_000_000  # one call's arguments (a file's content, say)
KEPT_OF_ARGUMENT = 1_000  # characters of a refused argument's head and tail kept
AFTER_END_TEXT = "not run: an earlier call of this turn ended the run"


@dataclass(frozen=True)
class TurnInfo:
    """What a tool call's hooks are told about the turn it belongs to."""

    turn: int
    model: str


@dataclass(frozen=True)
class Screened:
    """A turn's tool calls as kept in the conversation (oversized arguments replaced by a
    note) and the error results of those that are not run, by index."""

    calls: tuple[ToolCall, ...]
    refused: dict[int, ToolResult]


def screen_calls(calls: Sequence[ToolCall], *, max_calls: int,
                 max_argument_chars: int) -> Screened:
    """Bound one turn: calls past `max_calls` and calls with oversized arguments get an
    error result the model can act on; the oversized arguments are not kept."""
    kept: list[ToolCall] = []
    refused: dict[int, ToolResult] = {}
    for index, call in enumerate(calls):
        size = len(call.arguments)
        if size > max_argument_chars:
            refused[index] = ToolResult(
                f"not run: the arguments of this {call.name} call are too large ({size:,} "
                f"characters; the limit is {max_argument_chars:,}). Send less at once: "
                "split the content over several calls.", is_error=True)
            call = replace(call, arguments=_cut_arguments(call.arguments))
        elif index >= max_calls:
            refused[index] = ToolResult(
                f"not run: {len(calls):,} tool calls in one turn; at most {max_calls} are run "
                f"per turn (this was call {index + 1}). Make the calls you still need in the "
                "next turn.", is_error=True)
        kept.append(call)
    return Screened(tuple(kept), refused)


def _cut_arguments(arguments: str) -> str:
    """What is kept of oversized arguments: valid JSON saying what was cut."""
    return json.dumps({"cut": f"arguments of {len(arguments):,} characters were not kept",
                       "head": arguments[:KEPT_OF_ARGUMENT],
                       "tail": arguments[-KEPT_OF_ARGUMENT:]}, ensure_ascii=False)


class ToolExecutor:
    """Answers tool calls through a toolbox; `close` releases its threads."""

    def __init__(
        self,
        toolbox: Toolbox,
        specs: Sequence[ToolSpec],
        outputs: SavedOutputs,
        *,
        max_parallel: int = DEFAULT_PARALLEL,
        user_hooks: UserHooks | None = None,
        interrupt: Interrupt | None = None,
        on_start: Callable[[ToolCall], None] = lambda call: None,
        on_end: Callable[[ToolCall, ToolResult], None] = lambda call, result: None,
        trace: RunTrace = NO_TRACE,
    ) -> None:
        self.toolbox = toolbox
        self.specs = {spec.name: spec for spec in specs}
        self.outputs = outputs
        self.max_parallel = max(1, max_parallel)
        self.user_hooks = user_hooks
        self.interrupt = interrupt
        self.on_start = on_start
        self.on_end = on_end
        self.trace = trace
        self._pool: futures.ThreadPoolExecutor | None = None

    def run(self, calls: Sequence[ToolCall], info: TurnInfo,
            expired: Callable[[], bool]) -> list[ToolResult | None]:
        """One result per call, in call order; None for a call skipped because time ran out."""
        results: list[ToolResult | None] = [None] * len(calls)
        together, alone, last = self._plan(calls)
        if together and not expired():
            self._run_together(calls, together, results, info, expired)
        ended = any(r is not None and r.ends_run for r in results)
        for index in alone + last:
            if expired():
                break
            if ended:
                results[index] = ToolResult(AFTER_END_TEXT, is_error=True)
                continue
            results[index] = self.answer(calls[index], info)
            ended = ended or results[index].ends_run  # type: ignore[union-attr]
        return results

    def _plan(self, calls: Sequence[ToolCall]) -> tuple[list[int], list[int], list[int]]:
        """Indexes that may run together, those that run alone, and the exclusive ones."""
        together, alone, last = [], [], []
        for index, call in enumerate(calls):
            spec = self.specs.get(call.name)
            if spec is not None and spec.exclusive:
                last.append(index)
            elif spec is None or spec.parallel:
                together.append(index)
            else:
                alone.append(index)
        return together, alone, last

    def _run_together(self, calls: Sequence[ToolCall], indexes: list[int],
                      results: list[ToolResult | None], info: TurnInfo,
                      expired: Callable[[], bool]) -> None:
        if len(indexes) == 1 or self.max_parallel == 1:
            for index in indexes:
                if expired():
                    return
                results[index] = self.answer(calls[index], info)
            return

        def job(index: int) -> ToolResult | None:
            return None if expired() else self.answer(calls[index], info)

        pool = self._threads()
        pending = {pool.submit(job, index): index for index in indexes}
        while pending:
            done, _ = futures.wait(pending, timeout=0.05,
                                   return_when=futures.FIRST_COMPLETED)
            for future in done:
                results[pending.pop(future)] = future.result()
            if self.interrupt is not None:
                self.interrupt.check()

    def answer(self, call: ToolCall, info: TurnInfo) -> ToolResult:
        """Hooks, the tool itself and the size cap, for one call."""
        self.on_start(call)
        span = self.trace.tool_call(call)
        veto = self.user_hooks.pre_tool(call, info.turn, info.model) if self.user_hooks else None
        if veto is not None:
            result = ToolResult(f"not run: {veto}", is_error=True)
        else:
            result = self._invoke(call)
            if self.user_hooks:
                result = self.user_hooks.post_tool(call, result, info.turn, info.model)
        result = self.outputs.bound(call, result)
        span.answered(result)
        self.on_end(call, result)
        return result

    def _invoke(self, call: ToolCall) -> ToolResult:
        if call.name == READ_TOOL and self.outputs.spec is not None:
            return self.outputs.read(call)
        try:
            outcome: ToolResult | str = self.toolbox.call(call)
        except Exception as exc:  # a toolbox must not raise; keep the run alive if one does
            return ToolResult(f"internal error in tool {call.name}: {exc!r}", is_error=True)
        return ToolResult(outcome) if isinstance(outcome, str) else outcome

    def _threads(self) -> futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = futures.ThreadPoolExecutor(self.max_parallel, thread_name_prefix="tool")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
