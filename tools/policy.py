"""Which shell commands a person should decide on: the command read as bash reads it.

`judge(command)` parses the command (tools.shellparse) and checks every simple command it
would run — in pipelines, lists, substitutions, `sh -c` and `eval` strings (read again,
to a bounded depth), behind wrappers (sudo, env, xargs, timeout, nice...) and `find -exec`
— and every redirection's target. The answer is one Verdict: safe, unknown (a command
whose effect cannot be read from its text: an interpreter one-liner, a script piped into a
shell, a computed command name, a line the parser cannot read) or dangerous (the rule).
The profile's `approval` decides what happens next (tools.approval). This is a seat belt
for honest mistakes and obvious attacks; the sandbox is bubblewrap's job.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from kanban.tools.command_rules import (
    RECURSIVE_DELETE,
    RULES,
    SAFE,
    Call,
    Verdict,
    danger,
    git_environment,
    unknown,
)
from kanban.tools.shellparse import UNKNOWN_DIR, Simple, Unreadable, Word, read
from kanban.tools.targets import program_rule, write_verdict, written_paths
from kanban.tools.wrappers import DOWNLOADERS, Unwrapped, unwrap

__all__ = ["RECURSIVE_DELETE", "SAFE", "Verdict", "find_danger", "judge"]

MAX_DEPTH = 5  # `sh -c "eval 'bash -c ...'"` deeper than this is UNKNOWN
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh",
                    "fish", "rbash"})
_SHELL_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
DOWNLOADED = "running a downloaded script"
PIPED_DOWNLOAD = "piping a download into a shell"
# One-liner flags of interpreters: the program is in the command line, unreadable here.
_ONE_LINERS: dict[str, tuple[str, ...]] = {
    "python": ("c",), "pypy": ("c",), "perl": ("e", "E"), "ruby": ("e",),
    "node": ("e", "p", "-eval", "-print"), "nodejs": ("e", "p", "-eval", "-print"),
    "bun": ("e", "-eval", "-print"), "php": ("r",), "lua": ("e",), "luajit": ("e",),
    "rscript": ("e",), "julia": ("e", "-eval"), "osascript": ("e",),
    "pwsh": ("c", "command", "encodedcommand", "-command"),
    "powershell": ("c", "command", "encodedcommand", "-command"), "tclsh": (), "deno": (),
}


# The programs whose rules are about which processes they signal.
SIGNALLERS = frozenset({"kill", "pkill", "killall"})


def judge(command: str, extra: Iterable[str] = (), *, workspace: Path | None = None,
          own_pids: bool = False) -> Verdict:
    """The verdict on `command`: a built-in rule, else a profile's own regex (named by
    itself), else unknown or safe. `own_pids`: the command runs in a pid namespace of its
    own (the sandbox's), where a pid names one of its own processes and "every process" is
    every one of its own: kill, pkill and killall are judged as any other program there
    (the host's pid 1234, another user's, is not the one it would signal)."""
    verdict = _Judge(workspace, own_pids).text(command, ".", 0)
    if verdict.dangerous:
        return verdict
    for pattern in extra:
        if re.search(pattern, command, re.MULTILINE):
            return danger(f"profile pattern {pattern!r}")
    return verdict


def find_danger(command: str, extra: Iterable[str] = ()) -> str | None:
    """The rule a command breaks, or None (for unknown commands too)."""
    verdict = judge(command, extra)
    return verdict.why if verdict.dangerous else None


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    found = SAFE
    for verdict in verdicts:
        if verdict.dangerous:
            return verdict
        if verdict.kind == "unknown" and found.safe:
            found = verdict
    return found


def _interpreter(program: str) -> str | None:
    """The one-liner table's key for `program` (python3.12 -> python), if any."""
    name = program.lower()
    for key in _ONE_LINERS:
        if name == key or (name.startswith(key) and re.fullmatch(r"[0-9.]*", name[len(key):])):
            return key
    return None


class _Judge:
    def __init__(self, workspace: Path | None, own_pids: bool = False) -> None:
        self.workspace = workspace
        self.own_pids = own_pids

    def text(self, command: str, cwd: str, depth: int) -> Verdict:
        if depth > MAX_DEPTH:
            return unknown(f"commands nested more than {MAX_DEPTH} levels deep")
        try:
            reading = read(command, cwd)
        except Unreadable as exc:
            return unknown(f"the shell parser cannot read it ({exc})")
        if reading.fork_bomb:
            return danger("fork bomb")
        return worst([*(self.simple(s, depth) for s in reading.commands),
                      *(unknown(why) for why in reading.unknown)])

    def simple(self, simple: Simple, depth: int) -> Verdict:
        verdicts = [write_verdict(r.target, simple.cwd) for r in simple.redirects
                    if r.writes and r.target is not None]
        if simple.words:
            verdicts.append(self.run(simple, simple.words, depth))
        verdicts.append(git_environment((*simple.assignments, *simple.words)) or SAFE)
        return worst(verdicts)

    def run(self, simple: Simple, words: Sequence[Word], depth: int) -> Verdict:
        found = unwrap(words)
        if isinstance(found, Verdict):
            return found
        if found.inner is not None:  # env -S, watch: a command string of their own
            return self.text(found.inner, simple.cwd, depth + 1)
        if found.cwd_unknown:
            simple = replace(simple, cwd=UNKNOWN_DIR)
        return self.program(simple, found, depth)

    def program(self, simple: Simple, found: Unwrapped, depth: int) -> Verdict:
        program, args = found.program, found.args
        if program in SHELLS:
            return self.shell(simple, args, depth)
        if program == "eval":
            return self.eval(simple, args, depth)
        if program in ("source", "."):
            return self.script_file(args[:1])
        interpreter = _interpreter(program)
        if interpreter is not None:
            return self.interpreter(simple, program, interpreter, args)
        if program == "find":
            return self.find(simple, args, depth)
        if found.from_input:  # xargs: more arguments come from its input
            args = (*args, Word("<input>", dynamic=True))
        call = Call(program, tuple(args), simple.cwd, self.workspace)
        verdicts = [program_rule(call)]
        rule = None if self.own_pids and program in SIGNALLERS else RULES.get(program)
        if rule is not None:
            verdicts.append(rule(call))
        verdicts += [write_verdict(path, simple.cwd) for path in written_paths(call)]
        return worst(v for v in verdicts if v is not None)

    def shell(self, simple: Simple, args: Sequence[Word], depth: int) -> Verdict:
        string, operands = _shell_arguments(args)
        if string is not None:
            if string.dynamic:
                return danger(DOWNLOADED) if string.fetches else \
                    unknown("a shell string computed when the command runs")
            return self.text(string.text, simple.cwd, depth + 1)
        if operands:
            return self.script_file(operands[:1])
        return self.stdin_script(simple, "a shell", depth)

    def eval(self, simple: Simple, args: Sequence[Word], depth: int) -> Verdict:
        if any(a.fetches for a in args):
            return danger(DOWNLOADED)
        if any(a.dynamic for a in args):
            return unknown("eval of text computed when the command runs")
        return self.text(" ".join(a.text for a in args), simple.cwd, depth + 1)

    def script_file(self, operands: Sequence[Word]) -> Verdict:
        """A script run from a file (the workspace's own, like `python3 script.py`)."""
        if any(o.fetches for o in operands):
            return danger(DOWNLOADED)
        if any(o.dynamic for o in operands):
            return unknown("a script whose path is computed when the command runs")
        return SAFE

    def stdin_script(self, simple: Simple, what: str, depth: int) -> Verdict:
        """A shell or interpreter reading its program from standard input."""
        for redirect in simple.redirects:
            if redirect.body is not None and what == "a shell":
                return self.text(redirect.body, simple.cwd, depth + 1)
            if redirect.body is not None:
                return unknown(f"a script fed to {what} in a here-document")
        if simple.piped:
            if simple.upstream & DOWNLOADERS:
                return danger(PIPED_DOWNLOAD)
            return unknown(f"a script piped into {what}")
        return SAFE

    def interpreter(self, simple: Simple, program: str, key: str,
                    args: Sequence[Word]) -> Verdict:
        flags = _ONE_LINERS[key]
        for arg in args:
            text = arg.text
            if not text.startswith("-") or text == "-":
                break
            if text.startswith("--") and text[1:].lower() in flags or \
                    not text.startswith("--") and any(f in text[1:] for f in flags
                                                      if len(f) == 1) or \
                    text[1:].lower() in flags:
                return unknown(f"an interpreter one-liner ({program} {text})")
        if key == "deno" and args and args[0].text == "eval":
            return unknown("an interpreter one-liner (deno eval)")
        operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
        if operands and operands[0].text != "-":
            return self.script_file(operands[:1])
        return self.stdin_script(simple, program, 0)

    def find(self, simple: Simple, args: Sequence[Word], depth: int) -> Verdict:
        starts: list[Word] = []
        for arg in args:
            if arg.text.startswith(("-", "(", "!", ")")):
                break
            starts.append(arg)
        starts = starts or [Word(".")]
        texts = [a.text for a in args]
        verdicts: list[Verdict] = []
        if "-delete" in texts:
            call = Call("rm", (Word("-r"), *starts), simple.cwd, self.workspace)
            verdicts.append(RULES["rm"](call) or SAFE)
        for i, text in enumerate(texts):
            if text in ("-exec", "-execdir", "-ok", "-okdir"):
                command = _exec_words(args[i + 1:], starts)
                verdicts += [self.run(replace(simple, redirects=()), words, depth + 1)
                             for words in command]
        return worst(verdicts)


def _shell_arguments(args: Sequence[Word]) -> tuple[Word | None, list[Word]]:
    """A shell's `-c` string (None without one) and its other operands."""
    command_string, skip, options = False, False, True
    operands: list[Word] = []
    for arg in args:
        text = arg.text
        if skip:
            skip = False
        elif options and text in _SHELL_VALUE_OPTIONS:
            skip = True
        elif options and text in ("--", "-"):
            options = False
        elif options and text.startswith(("-", "+")) and not text.startswith("--"):
            command_string = command_string or "c" in text[1:]
        elif options and text.startswith("--"):
            continue
        else:
            options = False
            operands.append(arg)
    if command_string:
        return (operands[0] if operands else Word("")), operands[1:]
    return None, operands


def _exec_words(args: Sequence[Word], starts: Sequence[Word]) -> list[list[Word]]:
    """The command of `find -exec ... ;` once per starting point, `{}` replaced by it."""
    words: list[Word] = []
    for arg in args:
        if arg.text in (";", "+"):
            break
        words.append(arg)
    return [[Word(w.text.replace("{}", s.text), w.dynamic or ("{}" in w.text and s.dynamic),
                  w.fetches) for w in words] for s in starts]
