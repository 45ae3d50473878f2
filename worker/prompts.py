"""What a worker's agent is told."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kanban.records import CardRecord

if TYPE_CHECKING:
    from kanban.approvals import ApprovalRecord
    from kanban.skills import Skill
    from kanban.worker.materials import Materials

SYSTEM = """You are a worker on a kanban board. You own exactly one card.
Use kanban_show to read your card (goal, context, results of its dependencies, comments).
Report progress with kanban_heartbeat. When you are done, call kanban_complete with a short
summary of your result. If you cannot go on without a person, call kanban_block with the reason.
You may only act on cards of your own board."""
WORKSPACE = """Your workspace is a directory of your own: file paths are relative to it and
commands run in it. Nothing outside it is yours; paths that leave it are refused. Say in your
summary which files hold your result."""


def system_prompt(toolsets: Sequence[str]) -> str:
    """The same for every card of a profile (providers cache it); workers with files or a
    shell are told where they work."""
    works = any(t in ("file", "terminal") or t.startswith("mcp:") for t in toolsets)
    return SYSTEM + ("\n\n" + WORKSPACE if works else "")


def first_prompt(card: CardRecord, materials: Materials | None = None,
                 decisions: Iterable[ApprovalRecord] = (), unblocked: Iterable[str] = ()) -> str:
    parts = [f"Your card is #{card.id}: {card.title}"]
    if card.goal:
        parts.append(f"Goal: {card.goal}")
    if card.context:
        parts.append(f"Context: {card.context}")
    if materials is not None and materials.attachments:
        listed = "\n".join(f"- {path} ({record.size:,} bytes, {record.media_type})"
                           for record, path in materials.attachments)
        parts.append(f"Files attached to your card, read-only in your workspace:\n{listed}")
    if card.attempt > 1:
        parts.append(f"This is attempt {card.attempt}; kanban_show lists earlier attempts.")
    parts += news_since_last_run(card, decisions, unblocked)
    return "\n\n".join(parts)


def news_since_last_run(card: CardRecord, decisions: Iterable[ApprovalRecord],
                        unblocked: Iterable[str] = ()) -> list[str]:
    """What the model must hear at the start of an attempt, fresh or resumed: a review's
    feedback on the previous attempt, a person's note on unblocking it, a person's answers
    to the commands it asked to run."""
    notes = [f"A person unblocked your card with this note:\n{note}" for note in unblocked]
    if card.feedback:  # a review's, or a person's `kanban reject` note
        notes.append("The review of your previous attempt asked for changes. Its feedback:\n"
                     f"{card.feedback}")
    return notes + decision_notes(decisions)


def decision_notes(decisions: Iterable[ApprovalRecord]) -> list[str]:
    """A person's answers to the commands the card asked to run, as the model reads them
    (in the first prompt, or after a resumed conversation)."""
    notes = []
    for d in decisions:
        if d.decision == "approved":
            notes.append(f"A person approved this command; you may run it now, exactly as "
                         f"written: {d.command}")
        elif d.decision == "denied":
            because = f" Their reason: {d.reason}" if d.reason else ""
            notes.append(f"A person denied this command; do not run it: {d.command}.{because}")
    return notes


def skills_prompt(skills: Sequence[Skill]) -> str:
    """The card's skills by name and description, sent as the first user message: the
    system prompt stays the same for every card, so providers can cache it."""
    lines = [f"- {s.name}: {s.description}" + (f" (tags: {', '.join(s.tags)})" if s.tags else "")
             + (" [written by an agent]" if s.written_by is not None else "")
             for s in skills]
    return ("Skills for this card. Before you do the part of the work a skill covers, read "
            "it with skill_view(name) and follow it.\n" + "\n".join(lines))
