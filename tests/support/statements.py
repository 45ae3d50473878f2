"""Every statement a process actually sends to its database, with the code that sent it.

SQLite: each connection's trace callback (the statement as executed, parameters bound);
PostgreSQL: psycopg's cursor factory (the statement and its parameters). Nothing is taken
from a list kept beside the code: what runs is what gets recorded, from every thread and
every `Database` opened in this process while recording is on.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban.state.pg_connect import PgConnector
from kanban.state.sqlite import SQLiteDatabase

REPO = Path(__file__).resolve().parents[2]
_NOT_CALLERS = (REPO / "state", REPO / "tests")


@dataclass
class Statements:
    """SQL text -> (parameters, the first project frame outside state/ that sent it)."""

    seen: dict[str, tuple[Any, str]] = field(default_factory=dict)

    def add(self, sql: str, params: Any) -> None:
        if sql not in self.seen:
            self.seen[sql] = (params, _caller())

    def __len__(self) -> int:
        return len(self.seen)


def _caller() -> str:
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename)
        if path.is_relative_to(REPO) and not any(path.is_relative_to(p) for p in _NOT_CALLERS):
            return f"{path.relative_to(REPO)}:{frame.lineno} {frame.name}"
    return "?"


@contextmanager
def tracing_sqlite() -> Iterator[Statements]:
    """Record what every SQLite connection opened from now on executes, and what the
    connections already open execute."""
    statements = Statements()
    connect = SQLiteDatabase.connect

    def traced(self: SQLiteDatabase) -> Any:
        raw = connect(self)
        raw.set_trace_callback(lambda sql: statements.add(sql, None))
        return raw

    SQLiteDatabase.connect = traced  # type: ignore[method-assign]
    try:
        yield statements
    finally:
        SQLiteDatabase.connect = connect  # type: ignore[method-assign]


@contextmanager
def tracing_postgres() -> Iterator[Statements]:
    """Record what every psycopg cursor of a PostgreSQL connection made from now on runs."""
    import psycopg

    statements = Statements()

    class Recording(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            statements.add(str(query), params)
            return super().execute(query, params, **kwargs)

    kwargs = PgConnector.kwargs

    def traced(self: PgConnector, *, options: bool | None = None) -> dict[str, Any]:
        return {**kwargs(self, options=options), "cursor_factory": Recording}

    PgConnector.kwargs = traced  # type: ignore[method-assign]
    try:
        yield statements
    finally:
        PgConnector.kwargs = kwargs  # type: ignore[method-assign]
