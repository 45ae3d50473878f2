"""Which shell commands are dangerous: a built-in list plus a profile's own regexes.

A match does not mean a command is malicious, only that a person should decide (the
profile's `approval`: deny, ask or allow). The checks read the command as text; they are a
seat belt for honest mistakes and obvious attacks, not a sandbox (that is bubblewrap's job).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SEGMENT_SPLIT = re.compile(r"\|\||&&|[;|&\n()`]|\$\(")
_PREFIXES = {"sudo", "doas", "env", "command", "exec", "nice", "nohup", "time", "xargs",
             "busybox", "builtin", "timeout", "stdbuf"}
_OUTSIDE_START = ("/", "~", "$HOME", "${HOME}", "$(", "`")
_SYSTEM_DIRS = r"(?:etc|usr|bin|sbin|lib|lib32|lib64|boot|var|sys|proc|dev|root|home|opt|srv|run)"
_SHELLS = r"(?:ba|z|da|k|c|tc|fi)?sh|python[0-9.]*|perl|ruby|node|php"


@dataclass(frozen=True)
class Danger:
    """A dangerous-command rule: its name (shown to people and agents) and a regex."""

    name: str
    regex: re.Pattern[str]

    def matches(self, command: str) -> bool:
        return self.regex.search(command) is not None


def _rule(name: str, pattern: str) -> Danger:
    return Danger(name, re.compile(pattern, re.IGNORECASE | re.MULTILINE))


BUILTIN_RULES: tuple[Danger, ...] = (
    _rule("mkfs (formats a filesystem)", r"\b(?:mkfs(?:\.\w+)?|mke2fs|mkswap|wipefs)\b"),
    _rule("dd to a device", r"\bdd\b[^;&|\n]*\bof=/dev/(?!null\b|zero\b|stdout\b|stderr\b)"),
    _rule("write to a block device",
          r">\s*/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|dm-|loop|md|disk)\w*"),
    _rule("fork bomb", r"(\w+|:)\s*\(\)\s*\{[^}]*\1\s*\|\s*\1\s*&"),
    _rule("piping a download into a shell",
          rf"\b(?:curl|wget|fetch)\b[^;&\n]*\|\s*(?:sudo\s+)?(?:env\s+)?(?:{_SHELLS})\b"),
    _rule("running a downloaded script",
          rf"\b(?:{_SHELLS}|eval|source|\.)\s+[^;&|\n]*(?:<\(|\$\(|`)\s*(?:curl|wget)\b"),
    _rule("shutdown or reboot",
          r"(?:^|[;&|(`]|\b(?:sudo|doas|exec|nohup))\s*(?:/s?bin/|/usr/s?bin/)?"
          r"(?:shutdown|reboot|halt|poweroff)(?=\s|$|;|&|\|)|\binit\s+[06]\b|"
          r"\bsystemctl\s+(?:reboot|poweroff|halt|kexec|emergency|rescue)\b"),
    _rule("recursive chmod/chown of a system path",
          r"\b(?:chmod|chown|chgrp)\b[^;&|\n]*(?:\s-[a-zA-Z]*R|\s--recursive)\b[^;&|\n]*"
          rf"\s(?:/(?=\s|$)|/\*|/{_SYSTEM_DIRS}\b|~)"),
    _rule("force push", r"\bgit\b[^;&|\n]*\bpush\b[^;&|\n]*(?:\s--force\b|\s--force-with-lease"
                        r"\b|\s-[a-zA-Z]*f\b|\s\+\S)"),
    _rule("write under /etc",
          r">>?\s*/etc/|\btee\b[^;&|\n]*\s/etc/|\bsed\b[^;&|\n]*\s-i[^;&|\n]*\s/etc/|"
          r"\b(?:cp|mv|install|ln|rsync)\b[^;&|\n]*\s/etc/\S*\s*(?:$|[;&|])"),
    _rule("killing every process", r"\bkill\s+(?:-\w+\s+)*-1\b|\bkillall5\b"),
)
RECURSIVE_DELETE = "recursive delete outside the workspace"


def find_danger(command: str, extra: Iterable[str] = ()) -> str | None:
    """The name of the first rule `command` matches (a profile's own regex is named by
    itself), or None when it looks safe."""
    if recursive_delete_outside(command):
        return RECURSIVE_DELETE
    for rule in BUILTIN_RULES:
        if rule.matches(command):
            return rule.name
    for pattern in extra:
        if re.search(pattern, command, re.MULTILINE):
            return f"profile pattern {pattern!r}"
    return None


def recursive_delete_outside(command: str) -> bool:
    """`rm -r` (or `find -delete`) of `/`, `~`, an absolute path or a path through `..`."""
    for segment in _SEGMENT_SPLIT.split(command):
        words = _words(segment)
        while words and (words[0] in _PREFIXES or "=" in words[0] or words[0].startswith("-")):
            words = words[1:]
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program == "rm" and _recursive(words[1:]) and any(map(_outside, _targets(words))):
            return True
        if program == "find" and _find_deletes(words[1:]):
            return True
    return False


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:  # unbalanced quotes: read it roughly rather than not at all
        return segment.split()


def _recursive(args: Sequence[str]) -> bool:
    for arg in args:
        if arg == "--":
            break
        if arg == "--recursive" or (re.match(r"^-[a-zA-Z]*[rR]", arg) and
                                    not arg.startswith("--")):
            return True
    return False


def _targets(words: Sequence[str]) -> list[str]:
    args = list(words[1:])
    if "--" in args:
        return args[args.index("--") + 1:]
    return [a for a in args if not a.startswith("-")]


def _outside(target: str) -> bool:
    return target.startswith(_OUTSIDE_START) or ".." in target.split("/")


def _find_deletes(args: Sequence[str]) -> bool:
    starts = [a for a in args if not a.startswith(("-", "(", ")", "!"))][:1]
    destructive = "-delete" in args or any(
        a in ("-exec", "-execdir") and i + 1 < len(args) and args[i + 1].endswith("rm")
        for i, a in enumerate(args))
    return destructive and any(map(_outside, starts))
