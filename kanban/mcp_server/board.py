"""The board as an MCP client uses it: one board, and each call one `Kanban` call.

Everything here is scoped to the board the server was started for: a card id of another
board is answered as a card that does not exist, and nothing is changed. Answers are
plain JSON-able data; `render` makes them safe to show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kanban.card_filter import CardFilter
from kanban.cards import NewCard
from kanban.errors import ValidationError
from kanban.records import CardDetail, CardRecord
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.config_file import resolve_config
from kanban.transitions import Actor

ACTOR = Actor("mcp")  # the history says a change came through the MCP server
RECENT_COMMENTS = 20
RECENT_RUNS = 10
RECENT_EVENTS = 20
RELATED = 50  # dependencies, dependents, children shown


@dataclass(frozen=True)
class McpBoard:
    """The one board an MCP server serves, over the database `kanban`."""

    kanban: Kanban
    board: str
    home: Path  # the board's folder: config.toml, workspaces

    def config(self) -> Config:
        return resolve_config(self.home)

    def card(self, card_id: int) -> CardRecord:
        """The card, if it is on this board (CardNotFound otherwise)."""
        return self.kanban.card(card_id, board=self.board)

    # -- reading ---------------------------------------------------------------------------

    def list_cards(self, statuses: list[str], limit: int) -> dict[str, Any]:
        page = self.kanban.card_page(CardFilter(board=self.board, statuses=statuses), limit)
        return {"board": self.board, "total": page.total, "more": page.more,
                "cards": [brief(c) for c in page.cards]}

    def search(self, text: str, limit: int) -> dict[str, Any]:
        hits = self.kanban.search(text, board=self.board, limit=limit)
        return {"board": self.board, "hits": [h.to_json() for h in hits]}

    def show(self, card_id: int) -> dict[str, Any]:
        detail = self.kanban.detail(card_id, board=self.board)
        approvals = self.kanban.approvals(card_id)
        return shown(detail, [a.to_json() for a in approvals[-RECENT_EVENTS:]])

    def read_board(self, per_column: int) -> dict[str, Any]:
        return self.kanban.board_snapshot(self.board, per_column=per_column).to_json()

    # -- changing --------------------------------------------------------------------------

    def add(self, new: NewCard, gate: str | None) -> dict[str, Any]:
        """As `kanban add` and the web board's form: the profile's defaults, refused now if
        config.toml lacks the profile (or a reviewer's), or a worktree has no repository."""
        config = self.config()
        chosen = config.profile(new.profile)
        if chosen.workspace == "worktree":
            from kanban.tools.worktree_lifecycle import require_repository

            require_repository(self.home)
        for dep in new.depends_on:
            self.card(dep)
        added = self.kanban.add(NewCard(
            title=new.title, goal=new.goal, context=new.context, board=self.board,
            priority=new.priority, profile=new.profile, depends_on=new.depends_on,
            max_attempts=chosen.max_attempts, key=new.key, created_by=ACTOR.name,
            review=review_gate(config, gate) or chosen.review))
        return {"card": brief(added.card), "created": added.created}

    def comment(self, card_id: int, body: str) -> dict[str, Any]:
        self.card(card_id)
        comment_id = self.kanban.comment(card_id, body, author=ACTOR.name)
        return {"card_id": card_id, "comment_id": comment_id}

    def decide_command(self, card_id: int, *, approve: bool, reason: str | None
                       ) -> dict[str, Any]:
        """Approve or deny the commands a blocked card waits on (never a review gate: a
        card in review is answered with `accept_review` or `send_back_review`)."""
        card = self.card(card_id)
        if card.status == "review":
            raise ValidationError(f"#{card_id} is in review, not waiting on a command: use "
                                  "accept_review or send_back_review")
        if approve:
            card = self.kanban.approve(card_id, reason=reason, actor=ACTOR)
        else:
            card = self.kanban.deny(card_id, reason=reason, actor=ACTOR)
        return {"card": brief(card)}

    def accept_review(self, card_id: int, note: str | None) -> dict[str, Any]:
        self.card(card_id)
        return {"card": brief(self.kanban.approve_review(card_id, note=note, actor=ACTOR))}

    def send_back(self, card_id: int, feedback: str) -> dict[str, Any]:
        self.card(card_id)
        return {"card": brief(self.kanban.reject(card_id, feedback, actor=ACTOR))}

    def start_lead(self, goal: str, context: str) -> dict[str, Any]:
        """`kanban run --detach`: the lead as a card for the board's dispatchers. Its model
        is the configured lead's, refused now if it cannot be built (no API key)."""
        from kanban.worker.lead import add_lead, usable_lead_model

        model = usable_lead_model(self.config(), os.environ, None)
        card_id = add_lead(self.kanban, goal=goal, context=context, board=self.board,
                           model=model)
        return {"card_id": card_id, "board": self.board, "model": model}


def review_gate(config: Config, gate: str | None) -> str | None:
    """`human` or `reviewer:PROFILE`, as stored. A verify gate runs a shell command on the
    host when the card completes: it is given with `kanban add --verify`, not by a client."""
    from kanban.review import gate_spec

    if not gate:
        return None
    kind, _, argument = gate.partition(":")
    if kind == "human" and not argument:
        return gate_spec(verify=None, reviewer=None, human=True)
    if kind == "reviewer" and argument:
        config.profile(argument)  # an unknown reviewer fails now, not after the work
        return gate_spec(verify=None, reviewer=argument, human=False)
    raise ValidationError("gate must be 'human' or 'reviewer:PROFILE' (a verify command is "
                          "set with `kanban add --verify`)")


def brief(card: CardRecord) -> dict[str, Any]:
    """A card in a list: what it is, where it stands, and its result if it has one."""
    return {"id": card.id, "title": card.title, "status": card.status,
            "priority": card.priority, "profile": card.profile,
            # as `kanban show` counts (attempt N of max_attempts), not the claim count
            "attempt": card.attempt - card.retry_base, "max_attempts": card.max_attempts,
            "review": card.review, "updated_at": card.updated_at.isoformat(),
            "result": card.result, "error": card.error}


def shown(detail: CardDetail, approvals: list[dict[str, Any]]) -> dict[str, Any]:
    """`kanban show` as data: the card in full, the latest comments, runs and events."""
    everything = detail.to_json()
    return {
        "card": everything["card"],
        "depends_on": everything["depends_on"][:RELATED],
        "dependents": everything["dependents"][:RELATED],
        "children": everything["children"][:RELATED],
        "comments": everything["comments"][-RECENT_COMMENTS:],
        "runs": [{k: r[k] for k in ("id", "attempt", "started_at", "finished_at", "outcome",
                                    "error", "progress")}
                 for r in everything["runs"][-RECENT_RUNS:]],
        "events": everything["events"][-RECENT_EVENTS:],
        "approvals": approvals,
        "on_dependency_failure": everything["on_dependency_failure"],
    }
