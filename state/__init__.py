"""The store: connections and transactions, tables, migrations, paths and config.

Knows nothing of agents. Importing it imports nothing else: the names below load on first
use (PEP 562), so `kanban.state.errors` costs a command no database driver.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kanban.state.db import open_database
    from kanban.state.errors import ConfigError, DatabaseError, KanbanError, UsageError
    from kanban.state.paths import DbLocation, resolve_db
    from kanban.state.store import Conn, Database

_WHERE = {
    "open_database": "db", "ConfigError": "errors", "DatabaseError": "errors",
    "KanbanError": "errors", "UsageError": "errors", "DbLocation": "paths",
    "resolve_db": "paths", "Conn": "store", "Database": "store",
}

__all__ = [
    "ConfigError",
    "Conn",
    "Database",
    "DatabaseError",
    "DbLocation",
    "KanbanError",
    "UsageError",
    "open_database",
    "resolve_db",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
