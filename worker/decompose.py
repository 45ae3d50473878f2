"""`--dry-run` triage: the decomposer profile's agent, run here, proposes a graph that is
printed and never created. (On the board a worker runs the same agent for a decomposer
card; its `kanban_decompose` creates the cards.)"""

from __future__ import annotations

from collections.abc import Mapping

from kanban.agent.errors import FatalModelError
from kanban.agent.limits import Limits
from kanban.agent.loop import run_agent
from kanban.errors import KanbanError
from kanban.state.config import Config
from kanban.tools.catalog import REGISTRY
from kanban.tools.triage_tools import TOOLSET, DryRun
from kanban.triage import Graph, catalogue, decomposer_goal
from kanban.worker.prompts import SYSTEM
from kanban.worker.redact import redact, secrets_in
from kanban.worker.runtime import key_values, model_chain


def propose(config: Config, decomposer: str, *, title: str, goal: str, context: str,
            env: Mapping[str, str]) -> Graph:
    """The graph the decomposer proposes for an idea; KanbanError if it proposes none."""
    profile = config.profile(decomposer)
    secrets = sorted({*secrets_in(env), *key_values(profile, env)}, key=len, reverse=True)
    task, idea = decomposer_goal(title, goal, context)
    prompt = f"Your card: triage of a rough idea.\n\nGoal: {task}\n\nContext: {idea}\n\n" \
             f"{catalogue(config)}"
    recorder = DryRun(tuple(config.profiles), max_cards=config.limits.max_children_per_card)
    try:
        model = model_chain(profile, profile.resolved_model(env), env)
    except FatalModelError as exc:
        raise KanbanError(f"decomposer {decomposer!r}: {redact(exc.message, secrets)}") from None
    result = run_agent(model, system=SYSTEM, prompt=prompt,
                       toolbox=REGISTRY.toolbox([TOOLSET], recorder),
                       limits=Limits(max_turns=profile.max_turns,
                                     token_budget=profile.token_budget))
    if recorder.graph is None:
        why = redact(result.error, secrets) if result.error else str(result.stop_reason)
        raise KanbanError(f"decomposer {decomposer!r} proposed no cards ({why})")
    return recorder.graph
