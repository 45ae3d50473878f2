"""Editing an unfinished card: title, goal, context, priority, profile, limits and what it
does when a dependency fails."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from kanban import validation as v
from kanban.cards import get_card
from kanban.errors import InvalidTransition, ValidationError
from kanban.events import record_event
from kanban.records import CardRecord
from kanban.state.store import Conn
from kanban.states import TERMINAL, CardStatus

# Long texts are recorded by name only; short values with their old and new value.
_TEXTS = ("goal", "context")


@dataclass(frozen=True)
class CardEdit:
    """The fields to change; None leaves a field as it is."""

    title: str | None = None
    goal: str | None = None
    context: str | None = None
    priority: int | None = None
    profile: str | None = None
    max_attempts: int | None = None
    timeout_s: float | None = None
    # block | cancel (kanban.dependency_failure), or "board": follow the board's again
    on_dependency_failure: str | None = None

    def given(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    def validated(self) -> CardEdit:
        if self.title is not None:
            v.title(self.title)
        if self.goal is not None:
            v.text(self.goal, "goal", v.MAX_GOAL)
        if self.context is not None:
            v.text(self.context, "context", v.MAX_CONTEXT)
        if self.priority is not None:
            v.number(self.priority, "priority", v.PRIORITY_RANGE)
        if self.max_attempts is not None:
            v.number(self.max_attempts, "max attempts", v.MAX_ATTEMPTS_RANGE)
        if self.timeout_s is not None:
            v.number(self.timeout_s, "timeout", v.TIMEOUT_RANGE)
        if self.profile is not None and not v.BOARD_NAME.match(self.profile):
            raise ValidationError(f"invalid profile name {self.profile!r}")
        if self.on_dependency_failure not in (None, v.BOARD_POLICY):
            v.dependency_policy(self.on_dependency_failure)
        return self


def edit_card(conn: Conn, card_id: int, edit: CardEdit, *, now: datetime,
              actor: str = "user") -> tuple[CardRecord, list[str]]:
    """Apply `edit` to an unfinished card; returns the card and the names that changed.

    An edit that changes nothing writes nothing. A running card's worker sees the new
    values on its next attempt; the lease and claim are untouched."""
    edit = edit.validated()
    card = get_card(conn, card_id)
    if CardStatus(card.status) in TERMINAL:
        raise InvalidTransition(f"cannot edit #{card_id}: it is {card.status} (only unfinished "
                                "cards can be edited; `kanban retry` queues it again)")
    wanted = edit.given()
    if "title" in wanted:
        wanted["title"] = wanted["title"].strip()
    if wanted.get("on_dependency_failure") == v.BOARD_POLICY:
        wanted["on_dependency_failure"] = None  # the board's, whatever it is then
    changed = {name: value for name, value in wanted.items() if getattr(card, name) != value}
    if not changed:
        return card, []
    assignments = ", ".join(f"{name} = :{name}" for name in changed)
    conn.run(f"UPDATE card SET {assignments}, updated_at = :now WHERE id = :id",
             {**changed, "now": now, "id": card_id})
    values: dict[str, Any] = {name: {"from": getattr(card, name), "to": value}
                              for name, value in changed.items() if name not in _TEXTS}
    record_event(conn, board=card.board, card_id=card_id, kind="edited", actor=actor, at=now,
                 changed=sorted(changed), **values)
    return get_card(conn, card_id), sorted(changed)
