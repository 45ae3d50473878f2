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


class CorruptDatabaseError(DatabaseError):
    """The database file is damaged: whoever meets this stops writing (see `kanban check`)."""


class TransientDatabaseError(DatabaseError):
    """The database is briefly unreachable or asked for a retry (connection lost, server
    shutting down, serialization failure, deadlock). Trying again later may succeed.

    `in_doubt` is True when the failure came while committing: the transaction may have
    been applied, so only an idempotent change may simply be repeated. `kind` names a
    fault of the host where one is known ("busy", "read_only", "full", "io",
    "wal_missing"); None for a server that is away.
    """

    def __init__(self, message: str, *, in_doubt: bool = False, kind: str | None = None) -> None:
        super().__init__(message)
        self.in_doubt = in_doubt
        self.kind = kind
