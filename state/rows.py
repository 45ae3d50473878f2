"""Stored rows as Python values: times come back from SQLite as text."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
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


@lru_cache(maxsize=512)
def _time_columns(columns: tuple[str, ...]) -> tuple[bool, ...]:
    """Which of `columns` hold times: worked out once per column list, not once per row."""
    return tuple(is_time_column(name) for name in columns)


def row_dict(columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row by column name, with every `*_at` column (and run_after) as an aware datetime."""
    timed = _time_columns(columns if isinstance(columns, tuple) else tuple(columns))
    return {name: as_time(value) if is_time and value is not None else value
            for name, is_time, value in zip(columns, timed, row, strict=True)}


def with_times(row: dict[str, Any]) -> dict[str, Any]:
    """The same conversion for a row already keyed by column name."""
    timed = _time_columns(tuple(row))
    return {name: as_time(value) if is_time and value is not None else value
            for (name, value), is_time in zip(row.items(), timed, strict=True)}
