"""Limits on what a card may hold; checked before anything is written."""

from __future__ import annotations

import re

from kanban.errors import ValidationError

MAX_TITLE = 500
MAX_GOAL = 20_000
MAX_CONTEXT = 100_000
MAX_COMMENT = 20_000
MAX_SUMMARY = 100_000
PRIORITY_RANGE = (-1_000_000, 1_000_000)
MAX_ATTEMPTS_RANGE = (1, 100)
TIMEOUT_RANGE = (1.0, 7 * 24 * 3600.0)
BOARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_KEY = 200
MAX_SKILLS = 16
# C0 but tab, newline and carriage return; DEL; C1; bidi embeddings, overrides, isolates
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e"
                      "\u2066-\u2069]")


MAX_ID = 2**63 - 1  # SQLite's largest integer


def text(value: str, what: str, limit: int, *, required: bool = False) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{what} is not valid UTF-8 text") from None
    if _CONTROL.search(value):
        raise ValidationError(f"{what} contains control characters")
    if required and not value.strip():
        raise ValidationError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValidationError(f"{what} is {len(value):,} characters; the limit is {limit:,}")
    return value


def title(value: str) -> str:
    value = text(value, "title", MAX_TITLE, required=True).strip()
    if "\n" in value or "\r" in value:
        raise ValidationError("title must be one line")
    return value


def number(value: float, what: str, bounds: tuple[float, float]) -> float:
    low, high = bounds
    if not (low <= value <= high):
        raise ValidationError(f"{what} must be between {low:g} and {high:g}, not {value:g}")
    return value


def board_name(value: str) -> str:
    if not BOARD_NAME.match(value):
        raise ValidationError(
            f"invalid board name {value!r}: use 1-64 letters, digits, '.', '_' or '-'"
        )
    return value


def key(value: str) -> str:
    """An idempotency key: one line of printable text."""
    text(value, "key", MAX_KEY, required=True)
    if "\n" in value or "\r" in value or "\t" in value:
        raise ValidationError("key must be one line")
    return value


def skill_names(names: tuple[str, ...]) -> tuple[str, ...]:
    if len(names) > MAX_SKILLS:
        raise ValidationError(f"a card may name at most {MAX_SKILLS} skills, not {len(names)}")
    for name in names:
        if not SKILL_NAME.match(name):
            raise ValidationError(f"invalid skill name {name!r}: use 1-64 letters, digits, "
                                  "'.', '_' or '-'")
    return names


# What a card does when a dependency fails or is cancelled (kanban.dependencies).
DEPENDENCY_POLICIES = ("block", "cancel")
BOARD_POLICY = "board"  # an edit's word for a card's policy that follows its board's again


def dependency_policy(value: str) -> str:
    if value not in DEPENDENCY_POLICIES:
        raise ValidationError(f"on_dependency_failure must be block or cancel, not {value!r}")
    return value
