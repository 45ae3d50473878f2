"""Small types the card state machine and the policies above it share: who acts on a card,
the roles a card plays, and its review gate. Below both: imports no board module but
validation and records."""

from __future__ import annotations

from dataclasses import dataclass

from kanban import validation as v
from kanban.errors import ValidationError
from kanban.records import CardRecord


@dataclass(frozen=True)
class Actor:
    """Who makes a change, and with which claim token if a worker."""

    name: str = "user"
    claim_token: str | None = None


USER = Actor()

# The roles a card plays: orchestrators may delegate (kanban.children); reviewer and
# decomposer cards serve another card (their subject); a triaged card waits on its split.
LEAF, ORCHESTRATOR = "leaf", "orchestrator"
REVIEWER_ROLE, DECOMPOSER_ROLE, TRIAGED_ROLE = "reviewer", "decomposer", "triaged"
ROLES = (LEAF, ORCHESTRATOR, REVIEWER_ROLE, DECOMPOSER_ROLE, TRIAGED_ROLE)
HELPER_ROLES = (REVIEWER_ROLE, DECOMPOSER_ROLE)  # cards whose end their subject hears of

VERIFY, REVIEWER, HUMAN = "verify", "reviewer", "human"


@dataclass(frozen=True)
class Gate:
    """A parsed review gate: its kind and its argument (the command or the profile)."""

    kind: str
    arg: str = ""

    @classmethod
    def parse(cls, spec: str) -> Gate:
        kind, _, arg = spec.partition(":")
        if kind == HUMAN and not arg:
            return cls(HUMAN)
        if kind == VERIFY and arg.strip():
            v.text(arg, "verify command", v.MAX_GOAL, required=True)
            return cls(VERIFY, arg)
        if kind == REVIEWER and v.BOARD_NAME.match(arg):
            return cls(REVIEWER, arg)
        raise ValidationError(f"invalid review gate {spec!r} (expected verify:COMMAND, "
                              "reviewer:PROFILE or human)")

    @classmethod
    def of(cls, card: CardRecord) -> Gate | None:
        return cls.parse(card.review) if card.review else None

    def spec(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


@dataclass(frozen=True)
class Verdict:
    """What a gate decided: passed, or the feedback for the next attempt."""

    passed: bool
    feedback: str = ""
