"""`kanban context ID`: exactly what a worker for the card would be given now.

Built by `plan.preview_run` and `plan.toolbox_for`, the functions the worker itself uses,
with credentials masked everywhere they could show.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban.agent.model import endpoint_for
from kanban.agent.retry import endpoint_label
from kanban.attachments import Attachments
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.sandbox_paths import card_home_path, reach
from kanban.tools.sandbox import own_network_here
from kanban.tools.scope import WorkerScope
from kanban.worker.plan import WorkerPlan, preview_run, toolbox_for
from kanban.worker.redact import MASK, redact, secrets_in
from kanban.worker.sandboxing import card_network, card_reaches_host

CLAIM_TOKEN = "(a fresh token at each claim)"
RUN_ID = "(the run's id at each claim)"
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+):[^@\s]+@")


@dataclass(frozen=True)
class WorkerPreview:
    plan: WorkerPlan
    tools: list[dict[str, Any]]
    environment: dict[str, str]
    lease_s: float
    secrets: list[str]
    reach: dict[str, Any] = field(default_factory=dict)  # what its commands can touch
    endpoint: str | None = None  # where its model is called: host and path

    def masked(self, text: str) -> str:
        return _URL_PASSWORD.sub(rf"\1:{MASK}@", redact(text, self.secrets))

    def to_json(self) -> dict[str, Any]:
        p = self.plan
        card = p.card
        return {
            "card_id": card.id, "board": card.board, "status": card.status,
            # a script card runs its command instead: no model, no prompt, no tools
            "script": self.masked(card.command) if card.command is not None else None,
            "profile": p.profile.name, "model": self.masked(p.model),
            "base_url": self.masked(p.profile.base_url) if p.profile.base_url else None,
            "endpoint": self.endpoint,
            "limits": {"max_turns": p.limits.max_turns, "token_budget": p.limits.token_budget,
                       "max_cost": p.limits.max_cost, "spent_cost": p.limits.spent_cost,
                       "timeout_s": p.timeout_s, "lease_s": self.lease_s,
                       "attempts_left": max(0, card.max_attempts - (card.attempt
                                                                    - card.retry_base))},
            "toolsets": list(p.toolsets),
            "tools": self.tools,
            "skills": [{"name": s.name, "description": s.description, "source": s.source,
                        "files": p.materials.skill_files.get(s.name, [])} for s in p.skills],
            "attachments": [{"name": r.name, "path": path, "size": r.size}
                            for r, path in p.materials.attachments],
            "system": self.masked(p.system),
            "messages": [{"role": m.role, "content": self.masked(m.content or "")}
                         for m in p.opening],
            "environment": self.environment,
            "reach": self.reach,
        }


def preview_worker(kb: Kanban, card_id: int, config: Config, env: Mapping[str, str], *,
                   home: Path, db_target: str) -> WorkerPreview:
    """The plan, tools, limits and environment of a worker for `card_id`, masked."""
    from kanban.dispatcher.environment import worker_env  # pure: what the dispatcher passes

    card = kb.card(card_id)
    plan = preview_run(Attachments(kb.db, home, clock=kb.clock), card, config, env, home=home)
    scope = WorkerScope(kb, card.board, card.id, CLAIM_TOKEN, 0, lease_s=config.limits.lease_s,
                        skills={s.name: s for s in plan.skills},
                        skill_files=plan.materials.skill_files)
    environment = worker_env(env, model=plan.model, base_url=plan.profile.base_url, card={
        "KANBAN_DB": db_target, "KANBAN_BOARD": card.board, "KANBAN_CARD": str(card.id),
        "KANBAN_CLAIM_TOKEN": CLAIM_TOKEN, "KANBAN_RUN": RUN_ID,
        "KANBAN_LEASE_S": str(config.limits.lease_s)})
    secrets = secrets_in({**env, **environment})
    preview = WorkerPreview(plan, [], {}, config.limits.lease_s, secrets)
    tools = [{"name": t.name, "description": preview.masked(t.description),
              "parameters": t.parameters} for t in toolbox_for(plan, scope).specs()]
    masked_env = {k: _mask_variable(k, v, preview) for k, v in sorted(environment.items())}
    url = endpoint_for(plan.model, base_url=plan.profile.base_url, env=environment)
    return WorkerPreview(plan, tools, masked_env, config.limits.lease_s, secrets,
                         reach(plan.profile, own_network=own_network_here,
                               card_home=card_home_path(home, card.board, card.id),
                               network=card_network(kb, card, plan.profile, config),
                               reach_host=card_reaches_host(kb, card, plan.profile, config),
                               private_networks=config.web.allow_private),
                         endpoint=endpoint_label(url) if url else None)


def _mask_variable(name: str, value: str, preview: WorkerPreview) -> str:
    if name.endswith(("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")) and value != CLAIM_TOKEN:
        return MASK
    return preview.masked(value)
