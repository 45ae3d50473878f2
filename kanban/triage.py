"""Triage: a rough idea waits in `triage` until a decomposer splits it into child cards.

`kanban add --triage` (or `kanban triage ID`) puts the card in `triage` beside a decomposer
card (role `decomposer`) for the decomposer profile's agent, which proposes a graph of
cards with `kanban_decompose`. `decompose` creates them as the triaged card's children,
with their dependencies, and the triaged card (role `triaged`) then waits for them in the
durable `waiting` state (kanban.children.Delegation); when they have all settled it is
ready again, and its worker rolls their results up into its own (`rollup`), or blocks it
for a person when not all of them are done. Callers hold a write transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kanban import reactions
from kanban import validation as v
from kanban.card_types import DECOMPOSER_ROLE, TRIAGED_ROLE, USER, Actor
from kanban.cards import CARD_SELECT, Added, NewCard, add, card_from_row, get_card
from kanban.children import Delegation
from kanban.errors import ValidationError
from kanban.records import CardRecord
from kanban.state.config import Config
from kanban.state.errors import ConfigError
from kanban.state.store import Conn
from kanban.states import Action, CardStatus

ROLLUP_CHARS = 2_000  # of each child's result in the triaged card's own


@dataclass(frozen=True)
class Proposed:
    """One card of a proposed graph; `depends_on` holds earlier cards' 1-based numbers."""

    title: str
    goal: str = ""
    context: str = ""
    profile: str = "default"
    depends_on: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "goal": self.goal, "context": self.context,
                "profile": self.profile, "depends_on": list(self.depends_on)}


@dataclass(frozen=True)
class Graph:
    """The cards a decomposer proposes, in an order where dependencies come first."""

    cards: tuple[Proposed, ...]

    def to_json(self) -> dict[str, Any]:
        return {"cards": [c.to_json() for c in self.cards]}

    def lines(self) -> list[str]:
        """`--dry-run`'s text: one line per card, numbered, with what it waits for."""
        out = []
        for n, card in enumerate(self.cards, 1):
            after = (" after " + ", ".join(f"{d}" for d in card.depends_on)
                     if card.depends_on else "")
            out.append(f"{n}. [{card.profile}] {card.title}{after}")
            if card.goal:
                out.append(f"   goal: {card.goal}")
        return out


def parse_graph(raw: Any, profiles: Collection[str], *, max_cards: int) -> Graph:
    """A graph from a decomposer's tool arguments; ValidationError names the first problem.
    Dependencies point at earlier cards only, so a graph can never hold a cycle."""
    if not isinstance(raw, list) or not raw:
        raise ValidationError("cards must be a non-empty list")
    if len(raw) > max_cards:
        raise ValidationError(f"{len(raw)} cards proposed; at most {max_cards} per triage")
    cards = []
    for n, item in enumerate(raw, 1):
        if not isinstance(item, Mapping):
            raise ValidationError(f"card {n} must be an object")
        title = item.get("title")
        if not isinstance(title, str):
            raise ValidationError(f"card {n} needs a title")
        v.title(title)
        goal, context = item.get("goal", ""), item.get("context", "")
        v.text(goal, f"card {n} goal", v.MAX_GOAL)
        v.text(context, f"card {n} context", v.MAX_CONTEXT)
        profile = item.get("profile") or "default"
        if profile not in profiles:
            raise ValidationError(f"card {n}: unknown profile {profile!r} (known: "
                                  f"{', '.join(sorted(profiles))})")
        deps = item.get("depends_on", [])
        if not isinstance(deps, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                 for d in deps):
            raise ValidationError(f"card {n}: depends_on must be a list of card numbers")
        for dep in deps:
            if not 1 <= dep < n:
                raise ValidationError(f"card {n} depends on {dep}: a card may depend only on "
                                      f"cards listed before it (1 to {n - 1})")
        cards.append(Proposed(title.strip(), goal, context, profile,
                              tuple(sorted(set(deps)))))
    return Graph(tuple(cards))


def decomposer_profile(config: Config, name: str | None = None) -> str:
    """The profile whose agent decomposes: `name`, else the first with role decomposer."""
    if name is not None:
        config.profile(name)
        return name
    found = sorted(p.name for p in config.profiles.values() if p.role == DECOMPOSER_ROLE)
    if not found:
        raise ConfigError('no decomposer profile: add one with role = "decomposer" to '
                          "config.toml (or name one with --decomposer)")
    return found[0]


def catalogue(config: Config) -> str:
    """The profiles a decomposer may route cards to, with their descriptions."""
    rows = [f"- {p.name}: {p.description or '(no description)'}"
            for p in sorted(config.profiles.values(), key=lambda p: p.name)
            if p.role != DECOMPOSER_ROLE]
    return "Profiles you may give each card:\n" + "\n".join(rows)


def decomposer_goal(title: str, goal: str, context: str) -> tuple[str, str]:
    """The decomposer card's goal and context for one rough idea."""
    task = ("Split the idea below into a small graph of cards that together achieve it. "
            "Call kanban_decompose once with the cards: each has a title, a goal, a profile "
            "chosen from the descriptions below, and depends_on: the numbers of earlier cards "
            "whose results it needs. Prefer few, independent cards.")
    idea = f"Idea: {title}" + (f"\nGoal: {goal}" if goal else "") + (
        f"\nContext: {context}" if context else "")
    return task, idea


def add_triaged(conn: Conn, new: NewCard, *, decomposer: str, catalog: str,
                now: datetime) -> Added:
    """A new card in triage, with its decomposer card."""
    if new.review is not None and new.review.startswith("verify:"):
        raise ValidationError("a triaged card's result is its children's: give the children "
                              "a --verify gate, or the card --reviewer or --human")
    added = add(conn, replace(new, triage=True), now)
    if added.created:
        _add_decomposer_card(conn, added.card, decomposer, catalog, now)
    return added


def triage(conn: Conn, card_id: int, *, decomposer: str, catalog: str, now: datetime,
           actor: Actor = USER) -> CardRecord:
    """`kanban triage ID`: a card nobody has started goes to triage for a decomposer."""
    card = get_card(conn, card_id)
    if card.review is not None and card.review.startswith("verify:"):
        raise ValidationError(f"cannot triage #{card_id}: its verify gate would have nothing "
                              "to check (its result is its children's)")
    reactions.move(conn, card_id, Action.TRIAGE, CardStatus.TRIAGE, actor=actor, now=now,
                   kind="triaged", decomposer=decomposer)
    _add_decomposer_card(conn, card, decomposer, catalog, now)
    return get_card(conn, card_id)


def _add_decomposer_card(conn: Conn, card: CardRecord, decomposer: str, catalog: str,
                         now: datetime) -> CardRecord:
    goal, idea = decomposer_goal(card.title, card.goal, card.context)
    return add(conn, NewCard(
        title=f"Triage #{card.id}: {card.title}"[:v.MAX_TITLE], goal=goal,
        context=f"{idea}\n\n{catalog}"[:v.MAX_CONTEXT], board=card.board,
        priority=card.priority, profile=decomposer, parent_id=card.id,
        created_by=f"triage:#{card.id}", role=DECOMPOSER_ROLE, subject_id=card.id), now).card


def decompose(conn: Conn, card_id: int, graph: Graph, *, now: datetime,
              actor: Actor) -> list[CardRecord]:
    """Create the graph as the triaged card's children; it then waits for them all."""
    card = get_card(conn, card_id)
    made: list[CardRecord] = []
    for proposed in graph.cards:
        made.append(add(conn, NewCard(
            title=proposed.title, goal=proposed.goal, context=proposed.context,
            board=card.board, priority=card.priority, profile=proposed.profile,
            depends_on=[made[d - 1].id for d in proposed.depends_on], parent_id=card.id,
            created_by=f"triage:#{card.id}"), now).card)
    children = tuple(c.id for c in made)
    reactions.move(conn, card_id, Action.DECOMPOSE, CardStatus.WAITING,
                   actor=Actor(actor.name), now=now, kind="decomposed",
                   values={"role": TRIAGED_ROLE, "waiting_on": Delegation(children).to_json()},
                   children=list(children))
    return made


def unfinished(children: Sequence[CardRecord]) -> str | None:
    """Why a triaged card cannot end with its children's results yet (None: it can)."""
    left = [c for c in children if c.status != CardStatus.DONE]
    if not left:
        return None
    named = "; ".join(f"#{c.id} {c.title} is {c.status}" + (f" ({c.error})" if c.error else "")
                      for c in left)
    return (f"not every card it was split into is done: {named}"[:v.MAX_COMMENT - 200] +
            ". Finish them (retry, unblock), then unblock this card.")


def rollup(children: Sequence[CardRecord]) -> str:
    """The triaged card's result: each child's status and result, in order."""
    lines = [f"Done through {len(children)} cards:"]
    for child in children:
        result = (child.result or child.error or "").strip()
        if len(result) > ROLLUP_CHARS:
            result = result[:ROLLUP_CHARS] + " …"
        lines.append(f"- #{child.id} {child.title} ({child.status})" +
                     (f": {result}" if result else ""))
    return "\n".join(lines)


def triaged_children(conn: Conn, card_id: int) -> list[CardRecord]:
    """The cards a triaged card was split into (its decomposer card left out)."""
    rows = conn.all(f"{CARD_SELECT} WHERE parent_id = :id AND role != '{DECOMPOSER_ROLE}' "
                    "ORDER BY id", {"id": card_id})
    return [card_from_row(row) for row in rows]
