"""The provider-neutral agent loop: call the model, run its tool calls, repeat, within limits.

One turn: check the limits, fit the conversation into the context window, call the model
(streaming, with fallbacks), run the tool calls it made (concurrently where allowed),
append the results in call order, report the turn. The steps are the methods of `_Run`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from kanban.agent.context import (
    ContextPolicy,
    TokenGauge,
    compress,
    message_chars,
    request_chars,
)
from kanban.agent.errors import ContextOverflowError, FatalModelError, ModelError
from kanban.agent.fallback import FallbackModel, call_model
from kanban.agent.hooks import AgentHooks
from kanban.agent.interrupt import Interrupt, Interrupted
from kanban.agent.limits import BudgetWarnings, Limits, StopReason
from kanban.agent.model import Model
from kanban.agent.outputs import SavedOutputs
from kanban.agent.pricing import PriceTable, context_window
from kanban.agent.result import AgentResult
from kanban.agent.tool_calls import ToolExecutor, TurnInfo, screen_calls
from kanban.agent.tracing import NO_TRACE, RunTrace
from kanban.agent.types import (
    Message,
    ModelResponse,
    StreamEvent,
    Toolbox,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
)
from kanban.agent.user_hooks import FinishEvent, TurnEvent, UserHooks


def one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


GRACE_PROMPT = (
    "You have reached the turn limit for this run. Do not call any tools. "
    "Reply with a short summary of what you did and what is left to do."
)
SKIPPED_TOOL_TEXT = "not run: the run's time limit was reached"
__all__ = ["AgentResult", "Limits", "StopReason", "run_agent"]


def run_agent(
    model: Model,
    *,
    system: str,
    prompt: str | list[Message],
    toolbox: Toolbox,
    limits: Limits = Limits(),
    hooks: AgentHooks | None = None,
    clock: Callable[[], float] = time.monotonic,
    context: ContextPolicy = ContextPolicy(),
    outputs: SavedOutputs | None = None,
    user_hooks: UserHooks | None = None,
    prices: PriceTable | None = None,
    interrupt: Interrupt | None = None,
    trace: RunTrace = NO_TRACE,
) -> AgentResult:
    """Run one agent until it answers, a tool ends the run, a limit is hit, the model fails
    or `interrupt` is thrown; `trace` gets a span per model and tool call."""
    run = _Run(model, toolbox, limits, hooks or AgentHooks(), clock, context,
               outputs or SavedOutputs(None), user_hooks, prices or PriceTable(), interrupt,
               trace)
    try:
        run.start(system, prompt)
        result = run.drive()
    except Interrupted as exc:
        result = run.result(StopReason.INTERRUPTED, error=exc.message)
    except ModelError as exc:
        result = run.result(StopReason.ERROR, error=exc.message,
                            fatal=isinstance(exc, FatalModelError))
    finally:
        run.close()
    run.finish(result)
    trace.finished(str(result.stop_reason), result.usage, result.turns)
    return result


class _Run:
    """The state of one run; each method is one step of the loop."""

    def __init__(self, model: Model, toolbox: Toolbox, limits: Limits, hooks: AgentHooks,
                 clock: Callable[[], float], context: ContextPolicy, outputs: SavedOutputs,
                 user_hooks: UserHooks | None, prices: PriceTable,
                 interrupt: Interrupt | None, trace: RunTrace) -> None:
        self.model = model
        self.trace = trace
        self.limits = limits
        self.hooks = hooks
        self.clock = clock
        self.context = context
        self.prices = prices
        self.interrupt = interrupt
        if user_hooks is not None:  # a copy: the caller's object is not rewired
            user_hooks = replace(user_hooks,
                                 on_error=_both(user_hooks.on_error, hooks.on_hook_error))
        self.user_hooks = user_hooks
        self._restore: Callable[[], None] = lambda: None
        if isinstance(model, FallbackModel):
            previous = model.on_fallback
            model.on_fallback = _both(previous, hooks.on_fallback)
            self._restore = partial(setattr, model, "on_fallback", previous)
        specs = list(toolbox.specs())
        if outputs.spec is not None and all(s.name != outputs.spec.name for s in specs):
            specs.append(outputs.spec)
        self.tools: tuple[ToolSpec, ...] = tuple(specs)
        self.executor = ToolExecutor(toolbox, specs, outputs, max_parallel=limits.max_parallel,
                                     user_hooks=user_hooks, interrupt=interrupt,
                                     on_start=hooks.on_tool_start, on_end=hooks.on_tool_end,
                                     trace=trace)
        self.warnings = BudgetWarnings(limits)
        self.gauge = TokenGauge()
        self.tool_chars = request_chars((), self.tools)
        self.messages: list[Message] = []
        self.chars = 0
        self.usage = Usage()
        self.cost = 0.0
        self.priced = True
        self.turns = 0
        self.compressions = 0
        self.last_cost: float | None = None
        self.refused: dict[int, ToolResult] = {}  # this turn's calls answered without running
        self.started = clock()

    def start(self, system: str, prompt: str | list[Message]) -> None:
        if system:
            self.append(Message("system", system))
        opening = [Message("user", prompt)] if isinstance(prompt, str) else prompt
        for message in opening:
            self.append(message)

    def drive(self) -> AgentResult:
        while True:
            stop = self.limit_reached()
            if stop is not None:
                return self.result(stop)
            if self.turns >= self.limits.max_turns:
                return self.grace_call()
            self.fit_context()
            response = self.call_model()
            if response.tool_calls:
                stop = self.run_tools(response.tool_calls)
                self.end_turn(response)
                if stop is not None:
                    return self.result(stop)
                continue
            self.end_turn(response)
            follow_up = self.hooks.on_final_text(response.text or "")
            if follow_up is None:
                return self.result(StopReason.COMPLETED)
            self.append(Message("user", follow_up))

    # --- limits -----------------------------------------------------------------------

    def limit_reached(self) -> StopReason | None:
        if self.interrupt is not None:
            self.interrupt.check()
        if self.timed_out():
            return StopReason.TIMEOUT
        budget = self.limits.token_budget
        if budget is not None and self.usage.total_tokens >= budget:
            return StopReason.TOKEN_BUDGET
        if self.limits.max_cost is not None and self.total_cost >= self.limits.max_cost:
            return StopReason.COST_BUDGET
        return None

    @property
    def total_cost(self) -> float:
        """Dollars spent on the card: earlier runs and this one."""
        return self.limits.spent_cost + self.cost

    def timed_out(self) -> bool:
        timeout = self.limits.timeout_s
        return timeout is not None and self.clock() - self.started >= timeout

    def grace_call(self) -> AgentResult:
        """Out of turns: one last call without tools so the model can summarise."""
        self.append(Message("user", GRACE_PROMPT))
        response = self.call_model(grace=True)
        self.end_turn(response)
        return self.result(StopReason.TURN_LIMIT)

    # --- context ----------------------------------------------------------------------

    @property
    def window(self) -> int:
        return context_window(self.model.name, self.context.window)

    def fit_context(self) -> None:
        """Summarise the middle of the conversation once it passes the threshold."""
        tokens = self.gauge.tokens(self.chars + self.tool_chars)
        if tokens > self.window * self.context.compress_at:
            self.compress(self.context.keep_recent)

    def compress(self, keep_share: float) -> bool:
        """Summarise the middle, keeping a share of the window (or, when the provider said
        the conversation is too long for it, of the conversation) verbatim at the end."""
        chars_per_token = self.gauge.chars_per_token
        before = self.gauge.tokens(self.chars + self.tool_chars)
        room = min(self.window * chars_per_token, self.chars)
        done = compress(
            self.messages,
            keep_chars=int(room * keep_share),
            budget_chars=int(self.window * 0.5 * chars_per_token),
            summarise=lambda request: self.request(request, ()),
        )
        if done is None:
            return False
        self.messages = done.messages
        self.chars = sum(message_chars(m) for m in done.messages)
        self.compressions += 1
        self.hooks.on_message(done.summary)
        self.hooks.on_compress(done.summary, done.replaced, before)
        return True

    # --- the model --------------------------------------------------------------------

    def call_model(self, *, grace: bool = False) -> ModelResponse:
        """One turn's model call; a context overflow compresses and retries once."""
        tools = () if grace else self.tools
        self.hooks.on_model_start(self.turns + 1, self.model.name)
        try:
            response = self.request(self.messages, tools, chars=self.chars)
        except ContextOverflowError:
            if not self.compress(self.context.keep_recent / 2):
                raise
            response = self.request(self.messages, tools, chars=self.chars)
        self.turns += 1
        # Tool calls in the grace call will never be run; keep them out of the transcript.
        screened = screen_calls(() if grace else response.tool_calls,
                                max_calls=self.limits.max_tool_calls,
                                max_argument_chars=self.limits.max_argument_chars)
        self.refused = screened.refused
        calls = screened.calls
        self.append(Message("assistant", response.text, tool_calls=calls,
                            reasoning=response.reasoning, reasoning_data=response.reasoning_data,
                            model=response.source or self.model.name))
        self.hooks.on_model_end(self.turns)
        return replace(response, tool_calls=calls)

    def request(self, messages: Sequence[Message], tools: Sequence[ToolSpec], *,
                chars: int | None = None) -> ModelResponse:
        """Call the model (streaming to the hooks), and account for what it cost; `chars`
        is the size of `messages` when the caller already knows it."""
        snapshot = tuple(messages)
        span = self.trace.model_call(self.model.name, snapshot, tools)
        try:
            if self.interrupt is not None:
                response = self.interrupt.call(
                    lambda: call_model(self.model, snapshot, tools, self.listen),
                    here=getattr(self.model, "interruptible", False))
            else:
                response = call_model(self.model, snapshot, tools, self.listen)
        except (ModelError, Interrupted) as exc:
            span.failed(exc)
            raise
        except Exception as exc:  # an answer no adapter understood: the run's error, not a crash
            span.failed(exc)
            raise ModelError(f"model {self.model.name!r} sent an unreadable answer "
                             f"({type(exc).__name__}: {one_line(str(exc))})") from exc
        span.answered(response)
        sent = request_chars(snapshot, ()) if chars is None else chars
        self.gauge.calibrate(sent + self.tool_chars * bool(tools), response.usage.input_tokens)
        source = response.source or self.model.name
        cost = self.prices.cost(response.usage, source)
        if cost is None and response.model:
            cost = self.prices.cost(response.usage, response.model)
        self.usage += response.usage
        self.cost += cost or 0.0
        self.priced = self.priced and cost is not None
        self.hooks.on_usage(response.usage, source, cost)
        self.last_cost = cost
        return response

    def listen(self, event: StreamEvent) -> None:
        if self.interrupt is not None:
            self.interrupt.check()
        self.hooks.on_event(event)

    # --- tools ------------------------------------------------------------------------

    def run_tools(self, calls: Sequence[ToolCall]) -> StopReason | None:
        """Answer every call, in call order; the run ends if one asks to or time runs out."""
        info = TurnInfo(self.turns, self.model.name)
        run = [i for i in range(len(calls)) if i not in self.refused]
        ran = self.executor.run([calls[i] for i in run], info, self.timed_out)
        results: list[ToolResult | None] = [self.refused.get(i) for i in range(len(calls))]
        for index, result in zip(run, ran, strict=True):
            results[index] = result
        answered = [r if r is not None else ToolResult(SKIPPED_TOOL_TEXT, is_error=True)
                    for r in results]
        warning = self.warnings.due(self.turns, self.usage.total_tokens, self.total_cost)
        if warning and answered:
            last = answered[-1]
            answered[-1] = replace(last, content=f"{last.content}\n\n{warning}")
        for call, result in zip(calls, answered, strict=True):
            self.append_result(call, result)
        ends_run = any(r.ends_run for r in answered)
        if ends_run:
            return StopReason.COMPLETED
        return StopReason.TIMEOUT if any(r is None for r in results) else None

    def append_result(self, call: ToolCall, result: ToolResult) -> None:
        self.append(Message("tool", result.content, tool_call_id=call.id, name=call.name,
                            is_error=result.is_error))

    # --- bookkeeping ------------------------------------------------------------------

    def append(self, message: Message) -> None:
        self.messages.append(message)
        self.chars += message_chars(message)
        self.hooks.on_message(message)

    def end_turn(self, response: ModelResponse) -> None:
        self.hooks.on_turn_end(self.turns)
        if self.user_hooks:
            self.user_hooks.on_turn(TurnEvent(
                self.turns, response.source or self.model.name, response.text,
                response.tool_calls, response.usage, self.last_cost, self.user_hooks.context))

    def result(self, stop: StopReason, *, error: str | None = None,
               fatal: bool = False) -> AgentResult:
        last = next((m for m in reversed(self.messages) if m.role == "assistant"), None)
        return AgentResult(
            text=last.content if last else None,
            stop_reason=stop,
            usage=self.usage,
            messages=list(self.messages),
            turns=self.turns,
            error=error,
            fatal=fatal,
            cost=self.cost,
            priced=self.priced,
            compressions=self.compressions,
        )

    def close(self) -> None:
        self.executor.close()
        self._restore()

    def finish(self, result: AgentResult) -> None:
        if self.user_hooks:
            self.user_hooks.on_finish(FinishEvent(
                str(result.stop_reason), result.text, result.turns, result.usage, result.cost,
                result.error, self.user_hooks.context))
        self.hooks.on_finish(result)


def _both(first: Callable[..., None], second: Callable[..., None]) -> Callable[..., None]:
    """Tell the caller's listener and the run's hooks alike."""

    def call(*args: object) -> None:
        first(*args)
        second(*args)

    return call
