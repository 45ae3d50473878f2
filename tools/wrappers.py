"""Programs that run another program (sudo, env, xargs, timeout, nice...): the one they run.

`unwrap(words)` takes the wrappers off the front of a simple command and says what runs in
the end, with its arguments; or a Verdict when that cannot be read from the text.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from kanban.tools.command_rules import SAFE, Verdict, unknown
from kanban.tools.shellparse import Word

DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "lwp-request"})
# Each wrapper's options that take a value (the next word), beside flags that do not.
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T",
                       "--user", "--group", "--chdir", "--host", "--prompt", "--role",
                       "--type", "--other-user", "--command-timeout", "--close-from"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(), "builtin": frozenset(), "chronic": frozenset(),
    "unbuffer": frozenset(), "nocache": frozenset(), "catchsegv": frozenset(),
    "command": frozenset(),
    "exec": frozenset({"-a"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "setsid": frozenset(),
    "ionice": frozenset({"-c", "-n", "--class", "--classdata"}),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file",
                        "--delimiter", "--max-lines", "--max-args", "--max-procs",
                        "--max-chars", "--process-slot-var"}),
    "watch": frozenset({"-n", "--interval", "-d", "-q"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "flock": frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}),
}
_CHANGES_DIR = frozenset({"-C", "--chdir", "-D"})


@dataclass(frozen=True)
class Unwrapped:
    program: str  # the basename of what finally runs
    args: tuple[Word, ...]
    from_input: bool = False  # xargs: more arguments come from standard input
    cwd_unknown: bool = False  # env -C, sudo -D: it runs elsewhere
    inner: str | None = None  # env -S, watch: a command string the wrapper runs


def unwrap(words: Sequence[Word]) -> Unwrapped | Verdict:
    """What runs once the wrappers in front of `words` are taken off."""
    from_input = cwd_unknown = False
    words = list(words)
    while words:
        first = words[0]
        if first.dynamic:
            return unknown(f"the command's name is computed when it runs ({first.text})")
        program = posixpath.basename(first.text)
        if program not in _VALUE_OPTIONS:
            return Unwrapped(program, tuple(words[1:]), from_input, cwd_unknown)
        if program == "command" and any(w.text in ("-v", "-V") for w in words[1:2]):
            return SAFE  # a lookup, nothing runs
        rest, moved, inner = _after_options(program, words[1:])
        if inner is not None:
            return Unwrapped(program, (), inner=inner)
        from_input = from_input or program == "xargs"
        cwd_unknown = cwd_unknown or moved
        if program == "watch":
            return Unwrapped(program, (), inner=" ".join(w.text for w in rest))
        words = rest
    return SAFE  # a wrapper alone (`sudo -v`, `env`): it runs nothing else


def _after_options(program: str, args: list[Word]) -> tuple[list[Word], bool, str | None]:
    """The words after a wrapper's options (and, for env, its NAME=VALUE pairs; for timeout,
    its duration), whether it changes directory, and env -S's string."""
    values = _VALUE_OPTIONS[program]
    moved = False
    i = 0
    while i < len(args):
        text = args[i].text
        if text == "--":
            i += 1
            break
        if program == "env" and text in ("-S", "--split-string"):
            return [], moved, " ".join(a.text for a in args[i + 1:])
        if program == "env" and text.startswith(("-S", "--split-string=")):
            first = text.split("=", 1)[1] if text.startswith("--") else text[2:]
            return [], moved, " ".join([first, *(a.text for a in args[i + 1:])])
        if program == "env" and "=" in text and not text.startswith("-"):
            i += 1
            continue
        if not text.startswith("-") or text == "-":
            break
        name = text.split("=", 1)[0]
        moved = moved or name in _CHANGES_DIR
        i += 2 if text in values else 1
    rest = args[i:]
    if program == "timeout" and rest:
        rest = rest[1:]  # the duration
    if program == "flock" and rest:
        rest = rest[1:]  # the lock file
    return rest, moved, None
