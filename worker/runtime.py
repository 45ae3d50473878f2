"""Everything a card's agent runs with, built from config.toml, its profile and the
environment: the model chain, limits, context policy, saved outputs, prices, user hooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kanban.agent.context import ContextPolicy
from kanban.agent.hooks import AgentHooks
from kanban.agent.interrupt import Interrupt
from kanban.agent.limits import Limits
from kanban.agent.loop import AgentResult, run_agent
from kanban.agent.model import Model, ModelOptions, credentials_of, resolve_chain
from kanban.agent.outputs import SavedOutputs
from kanban.agent.pricing import Price, PriceTable
from kanban.agent.tracing import NO_TRACE, RunTrace
from kanban.agent.types import Message, Toolbox
from kanban.agent.user_hooks import UserHooks, load_hooks
from kanban.state.config import Config, Profile


@dataclass
class AgentRuntime:
    """One run's model and settings; `run` drives the agent with them."""

    model: Model
    limits: Limits
    context: ContextPolicy
    outputs: SavedOutputs
    prices: PriceTable
    user_hooks: UserHooks
    interrupt: Interrupt

    def run(self, *, system: str, prompt: str | list[Message], toolbox: Toolbox,
            hooks: AgentHooks, trace: RunTrace = NO_TRACE) -> AgentResult:
        try:
            return run_agent(self.model, system=system, prompt=prompt, toolbox=toolbox,
                             limits=self.limits, hooks=hooks, context=self.context,
                             outputs=self.outputs, user_hooks=self.user_hooks,
                             prices=self.prices, interrupt=self.interrupt, trace=trace)
        finally:
            close = getattr(self.model, "close", None)
            if close is not None:
                close()


def build_runtime(config: Config, profile: Profile, *, spec: str, env: Mapping[str, str],
                  interrupt: Interrupt, max_turns: int, spent_cost: float,
                  workspace: Path | None, hook_context: Mapping[str, Any]) -> AgentRuntime:
    """The runtime for one card; bad configuration raises FatalModelError or ConfigError."""
    model = model_chain(profile, spec, env)
    limits = run_limits(profile, max_turns=max_turns, spent_cost=spent_cost)
    context = ContextPolicy(window=profile.context_window, compress_at=profile.compress_at)
    hooks = load_hooks(config.hooks, use_entry_points=config.hook_entry_points,
                       context=hook_context)
    return AgentRuntime(model, limits, context,
                        SavedOutputs(workspace, cap=profile.tool_result_chars),
                        price_table(config), hooks, interrupt)


def run_limits(profile: Profile, *, max_turns: int, spent_cost: float) -> Limits:
    """The bounds of one run (also what `kanban context` shows)."""
    return Limits(max_turns=max_turns, token_budget=profile.token_budget,
                  max_cost=profile.max_cost, spent_cost=spent_cost,
                  max_parallel=profile.max_parallel_tools,
                  max_tool_calls=profile.max_tool_calls_per_turn,
                  max_argument_chars=profile.max_argument_chars)


def model_chain(profile: Profile, spec: str, env: Mapping[str, str]) -> Model:
    """The card's model with the profile's fallbacks, keys, API mode and reasoning."""
    options = ModelOptions(api_key_vars=profile.api_key_env, key_provider=credentials_of(spec),
                           base_url=profile.base_url, reasoning=profile.reasoning,
                           responses_api=profile.api == "responses")
    fallbacks = [f for f in profile.fallback if f != spec]
    return resolve_chain(spec, fallbacks, env=env, options=options)


def price_table(config: Config) -> PriceTable:
    return PriceTable({name: Price(p.input, p.output, p.cached)
                       for name, p in config.prices.items()})


def key_values(profile: Profile, env: Mapping[str, str]) -> Sequence[str]:
    """The API keys a profile names by variable: secrets to keep out of everything stored."""
    return [env[name] for name in profile.api_key_env if env.get(name)]
