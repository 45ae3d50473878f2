"""The one error base of the project; every layer raises subclasses of it."""

from __future__ import annotations


class KanbanError(Exception):
    """An error with a message fit to show a user as one line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(KanbanError):
    """The command was called wrongly (exit code 2)."""

    exit_code = 2


class ConfigError(KanbanError):
    """Configuration (paths, config.toml, profiles, credentials) is unusable."""


class DatabaseError(KanbanError):
    """The database cannot be opened or is not a kanban database."""


class SchemaTooNewError(DatabaseError):
    """The database was written by a newer version of kanban."""
