"""Stored rows as Python values: times come back from SQLite as text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any


def as_time(value: Any) -> datetime | None:
    """A stored time as an aware UTC datetime (SQLite hands back text)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def as_set_time(value: Any) -> datetime:
    """A stored time from a column that is never NULL."""
    at = as_time(value)
    if at is None:
        raise ValueError("a NOT NULL time column held NULL")
    return at


def is_time_column(name: str) -> bool:
    return name.endswith("_at") or name in ("at", "run_after")


def row_dict(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row by column name, with every `*_at` column (and run_after) as an aware datetime."""
    return {name: as_time(value) if is_time_column(name) else value
            for name, value in zip(columns, row, strict=True)}


def with_times(row: dict[str, Any]) -> dict[str, Any]:
    """The same conversion for a row already keyed by column name."""
    return {name: as_time(value) if is_time_column(name) else value
            for name, value in row.items()}
