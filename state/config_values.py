"""Typed TOML tables into frozen dataclasses: each value checked against its field's type,
and numbers against sensible ranges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from kanban.state.errors import ConfigError

_DAY = 24 * 3600.0
# Sensible ranges: a value outside is a typo or a unit mistake, refused with its range.
BOUNDS: dict[str, tuple[float, float]] = {
    "stale_after_days": (1, 3650), "archive_after_days": (1, 3650),  # [skills]
    "max_workers": (0, 1024), "lease_s": (1, 3600), "max_children_per_call": (1, 100),
    "max_concurrent_children": (1, 100), "max_depth": (0, 10),
    "max_children_per_card": (1, 1000), "child_timeout_s": (1, 7 * _DAY),
    "child_max_attempts": (1, 100), "child_max_turns": (1, 1000),
    "timeout_s": (1, 7 * _DAY), "max_turns": (1, 1000), "token_budget": (1, 10**9),
    "max_concurrent": (1, 1024), "max_attempts": (1, 100), "tree_token_budget": (1, 10**12),
    "max_workspace_bytes": (1 << 20, 1 << 50),
}


def check_bounds(record: Any, given: Any, section: str) -> None:
    """Refuse a number the table gave that is outside its range in BOUNDS."""
    for key in given if isinstance(given, Mapping) else ():
        if key in BOUNDS:
            low, high = BOUNDS[key]
            value = getattr(record, key)
            if not low <= value <= high:
                raise ConfigError(f"{section}.{key} = {value:g} is out of range "
                                  f"({low:g} to {high:g})")


def build(cls: type, values: Any, where: str, base: Any = None) -> Any:
    """A `cls` (or `base` with the table's keys replaced) from a table of its fields."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where} must be a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known or key == "name":
            raise ConfigError(f"{where}: unknown key {key!r}")
        kwargs[key] = _coerce(value, known[key].type, f"{where}.{key}")
    return replace(base, **kwargs) if base is not None else cls(**kwargs)


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    kind = str(annotation)
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false")
        return value
    if kind.startswith("Mapping"):
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{where} must be a table of strings")
        return dict(value)
    if "tuple" in kind:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{where} must be a list of strings")
        return tuple(value)
    if "float" in kind:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or value <= 0:
            raise ConfigError(f"{where} must be a positive number")
        return float(value)
    if kind.startswith("int"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"{where} must be a non-negative integer")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string")
    return value
