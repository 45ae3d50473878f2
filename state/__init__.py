"""Engine setup, tables, migrations and path/config resolution. Knows nothing of agents."""

from __future__ import annotations

from state.db import open_database
from state.engine import Database
from state.errors import ConfigError, DatabaseError, KanbanError, UsageError
from state.paths import DbLocation, resolve_db

__all__ = [
    "ConfigError",
    "Database",
    "DatabaseError",
    "DbLocation",
    "KanbanError",
    "UsageError",
    "open_database",
    "resolve_db",
]
