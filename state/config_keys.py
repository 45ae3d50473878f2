"""How a config.toml key is declared: one `setting(...)` per dataclass field gives its
default, description, range and allowed values. The parser (kanban.state.config_values)
checks a table against these declarations, and the reference (docs/reference/config.md)
is generated from them, so the two cannot disagree.

A field declared without `setting` (a profile's `name`) is not a key: the parser refuses it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, NamedTuple

KEY = "kanban.config_key"  # the metadata entry of a field that is a config key


class Kind(NamedTuple):
    """A key's value type: its name in the reference, and how a TOML value is checked
    and converted (`coerce(value, where)` raises ConfigError naming `where`)."""

    name: str
    coerce: Callable[[Any, str], Any]


@dataclass(frozen=True)
class Range:
    """The numbers a key takes: `low` to `high` inclusive, or strictly between them, or
    at least `low` when `high` is None."""

    low: float
    high: float | None = None
    exclusive: bool = False

    def problem(self, value: float) -> str | None:
        """The end of the error line for a value outside, or None."""
        if self.high is None:
            return None if value >= self.low else f" must be at least {self.low:g}"
        if self.exclusive:
            inside = self.low < value < self.high
            return None if inside else f" must be between {self.low:g} and {self.high:g}"
        inside = self.low <= value <= self.high
        return None if inside else f" = {value:g} is out of range ({self.low:g} to " \
                                   f"{self.high:g})"

    def text(self) -> str:
        """As the reference shows it (whole numbers in full, not as 1e+06)."""
        low, high = _number(self.low), _number(self.high)
        if self.high is None:
            return f"at least {low}"
        if self.exclusive:
            return f"between {low} and {high}, exclusive"
        return f"{low} to {high}"


@dataclass(frozen=True)
class Key:
    """A config key's declaration; the field holding it gives its name, type and default."""

    doc: str  # one line for the reference
    kind: Kind | None = None  # None: from the field's annotation
    range: Range | None = None
    choices: tuple[str, ...] = ()  # the values allowed (or, with `pattern`, their forms)
    pattern: str | None = None  # a regex the whole value must match
    ignore_case: bool = False  # choices compared case-blind
    required: bool = False  # the table must give it

    def __post_init__(self) -> None:
        if not self.doc.strip() or "\n" in self.doc:
            raise ValueError(f"a config key's description is one non-empty line: {self.doc!r}")

    def choice_problem(self, value: str) -> str | None:
        """The end of the error line for a value outside the choices, or None."""
        if not self.choices:
            return None
        if self.pattern is not None:
            allowed = re.fullmatch(self.pattern, value) is not None
        elif self.ignore_case:
            allowed = value.upper() in {c.upper() for c in self.choices}
        else:
            allowed = value in self.choices
        return None if allowed else f" must be {either(self.choices)}"


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def either(words: tuple[str, ...]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def setting(default: Any = None, doc: str = "", *, factory: Callable[[], Any] | None = None,
            **declared: Any) -> Any:
    """A dataclass field that is a config key: its default (or `factory`), its one-line
    description and the rest of its `Key`."""
    key = Key(doc, **declared)
    if factory is not None:
        return field(default_factory=factory, metadata={KEY: key})
    if isinstance(default, Mapping):  # a mutable default: each record gets its own copy
        frozen = dict(default)
        return field(default_factory=lambda: dict(frozen), metadata={KEY: key})
    return field(default=default, metadata={KEY: key})


def key_of(item: Field[Any]) -> Key | None:
    """The field's declaration, or None when the field is not a config key."""
    found = item.metadata.get(KEY)
    return found if isinstance(found, Key) else None


def keys(cls: type) -> dict[str, tuple[Field[Any], Key]]:
    """The config keys of a table's dataclass, in declaration order."""
    return {f.name: (f, key) for f in fields(cls) if (key := key_of(f)) is not None}
