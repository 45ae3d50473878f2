"""Delivery targets as typed by a person: `file:PATH`, `webhook:URL`, `cmd:COMMAND`,
`board:CARD`. Parsing checks the shape; `cron.checks` checks them against the machine."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from kanban.errors import ValidationError

MAX_TARGETS = 10
_FORMS = "file:PATH, webhook:URL, cmd:COMMAND or board:CARD"


class TargetKind(StrEnum):
    FILE = "file"  # append a dated entry to a file
    WEBHOOK = "webhook"  # POST JSON, signed with HMAC-SHA256
    CMD = "cmd"  # a command that reads the result on stdin
    BOARD = "board"  # a comment on a card


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    value: str  # canonical: an absolute path, a URL, a command, a card id

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"

    @property
    def card_id(self) -> int:
        assert self.kind is TargetKind.BOARD
        return int(self.value)


def parse_target(text: str, *, cwd: Path | None = None) -> Target:
    """A target from its text; relative file paths are taken from `cwd` (default: here)."""
    kind, colon, value = text.partition(":")
    if not colon or kind.strip().lower() not in set(TargetKind):
        raise ValidationError(f"unknown delivery target {text!r} (use {_FORMS})")
    target_kind, value = TargetKind(kind.strip().lower()), value.strip()
    if not value:
        raise ValidationError(f"delivery target {text!r} names nothing after '{kind}:'")
    if target_kind is TargetKind.FILE:
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = (cwd or Path.cwd()) / path
        return Target(target_kind, str(path.resolve()))
    if target_kind is TargetKind.WEBHOOK:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValidationError(f"delivery target {text!r}: a webhook needs an http:// or "
                                  "https:// URL with a host")
        return Target(target_kind, value)
    if target_kind is TargetKind.CMD:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValidationError(f"delivery target {text!r}: cannot read the command "
                                  f"({exc})") from None
        if not words:
            raise ValidationError(f"delivery target {text!r} names no command")
        return Target(target_kind, value)
    card = value.removeprefix("#")
    if not card.isdigit() or not 0 < int(card) < 2**63:
        raise ValidationError(f"delivery target {text!r}: board: takes a card id such as "
                              "board:12 or board:#12")
    return Target(target_kind, str(int(card)))


def parse_targets(texts: list[str] | tuple[str, ...], *, cwd: Path | None = None
                  ) -> tuple[Target, ...]:
    targets: list[Target] = []
    for text in texts:
        target = parse_target(text, cwd=cwd)
        if target not in targets:
            targets.append(target)
    if len(targets) > MAX_TARGETS:
        raise ValidationError(f"a job delivers to at most {MAX_TARGETS} targets, "
                              f"not {len(targets)}")
    return tuple(targets)


def program_of(target: Target) -> str:
    """The program a `cmd:` target starts (its first word)."""
    return shlex.split(target.value)[0]
