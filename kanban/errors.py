"""Typed board errors; each carries the one line a user sees."""

from __future__ import annotations

from kanban.state.errors import ConfigError, DatabaseError, KanbanError, UsageError

__all__ = [
    "BoardNotFound",
    "CardNotFound",
    "ConfigError",
    "DatabaseError",
    "DependencyError",
    "InvalidTransition",
    "KanbanError",
    "LeaseLost",
    "LimitExceeded",
    "SpawnPaused",
    "UsageError",
    "ValidationError",
]


class CardNotFound(KanbanError):
    def __init__(self, card_id: int, board: str | None = None) -> None:
        where = f" on board {board!r}" if board else ""
        super().__init__(f"no card #{card_id}{where}")
        self.card_id = card_id


class BoardNotFound(KanbanError):
    def __init__(self, board: str) -> None:
        super().__init__(f"no board named {board!r} (create it with `kanban boards create`)")


class ValidationError(KanbanError):
    """A value is empty, too long or out of range."""


class InvalidTransition(KanbanError):
    """The state machine forbids this change."""


class DependencyError(KanbanError):
    """A link to itself, across boards, or closing a cycle."""


class LeaseLost(KanbanError):
    """A fenced write found the claim token no longer current: the worker must stop."""


class LimitExceeded(KanbanError):
    """Depth or child limits refuse a new card."""


class SpawnPaused(KanbanError):
    """Spawning is paused (globally or for the board)."""
