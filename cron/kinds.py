"""The choices a job makes: its kind, its overlap and catch-up policies (light to import:
the CLI builds its options from these)."""

from __future__ import annotations

from enum import StrEnum


class JobKind(StrEnum):
    AGENT = "agent"  # a card whose agent works the goal
    SCRIPT = "script"  # a card whose worker runs a command; no model
    CHAIN = "chain"  # an agent card given other jobs' latest results as context


class Overlap(StrEnum):
    """What a due job does while the card of its previous fire is unfinished."""

    SKIP = "skip"
    ALLOW = "allow"


class CatchUp(StrEnum):
    """What a job does with the slots it missed while no dispatcher ran."""

    SKIP = "skip"  # fire only for a slot that is still recent; the rest are recorded missed
    ONCE = "once"  # one card for all of them (coalesce)
    ALL = "all"  # a card for each missed slot (up to a cap)


__all__ = ["CatchUp", "JobKind", "Overlap"]
