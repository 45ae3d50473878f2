"""What the dispatcher hands a worker in its environment, parsed: below the worker's main
and the agent card runner, which both read it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from kanban.state.errors import ConfigError
from kanban.workspaces import WORKSPACE_ENV, Workspace


@dataclass(frozen=True)
class WorkerEnv:
    """The variables the dispatcher hands every worker (its config path is read apart)."""

    db: str
    board: str
    card_id: int
    claim_token: str
    run_id: int
    lease_s: float
    lease_until: datetime | None = None  # the claim's lease, by the store's clock
    timeout_s: float | None = None  # the card's timeout, enforced by itself if orphaned
    workspace: Workspace | None = None  # as the dispatcher resolved it (else read here)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WorkerEnv:
        try:
            until = env.get("KANBAN_LEASE_UNTIL")
            timeout = env.get("KANBAN_TIMEOUT_S")
            workspace = env.get(WORKSPACE_ENV)
            return cls(env["KANBAN_DB"], env["KANBAN_BOARD"], int(env["KANBAN_CARD"]),
                       env["KANBAN_CLAIM_TOKEN"], int(env["KANBAN_RUN"]),
                       float(env.get("KANBAN_LEASE_S", "30")),
                       datetime.fromisoformat(until) if until else None,
                       float(timeout) if timeout else None,
                       Workspace.from_json(json.loads(workspace)) if workspace else None)
        except (KeyError, ValueError) as exc:
            raise ConfigError(f"worker environment incomplete: {exc}") from None
