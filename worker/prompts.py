"""What a worker's agent is told."""

from __future__ import annotations

from kanban.records import CardRecord

SYSTEM = """You are a worker on a kanban board. You own exactly one card.
Use kanban_show to read your card (goal, context, results of its dependencies, comments).
Report progress with kanban_heartbeat. When you are done, call kanban_complete with a short
summary of your result. If you cannot go on without a person, call kanban_block with the reason.
You may only act on cards of your own board."""


def first_prompt(card: CardRecord) -> str:
    parts = [f"Your card is #{card.id}: {card.title}"]
    if card.goal:
        parts.append(f"Goal: {card.goal}")
    if card.context:
        parts.append(f"Context: {card.context}")
    if card.attempt > 1:
        parts.append(f"This is attempt {card.attempt}; kanban_show lists earlier attempts.")
    return "\n\n".join(parts)
