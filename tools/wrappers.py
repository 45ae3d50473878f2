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
    "busybox": frozenset(),  # busybox rm -rf /x: the applet is the program
    "chroot": frozenset(),  # its new root, then the program
    "unshare": frozenset({"-S", "--setuid", "-G", "--setgid", "-R", "--root", "-w", "--wd",
                          "--map-user", "--map-group", "--map-users", "--map-groups",
                          "--propagation", "--monotonic", "--boottime"}),
    "setpriv": frozenset({"--reuid", "--regid", "--ruid", "--rgid", "--euid", "--egid",
                          "--groups", "--inh-caps", "--ambient-caps", "--bounding-set",
                          "--securebits", "--pdeathsig", "--selinux-label",
                          "--apparmor-profile", "--landlock-access", "--landlock-rule"}),
    "runuser": frozenset({"-u", "--user", "-g", "--group", "-G", "--supp-group", "-s",
                          "--shell", "-w", "--whitelist-environment"}),
    "nsenter": frozenset({"-t", "--target", "-S", "--setuid", "-G", "--setgid", "-w", "--wd",
                          "-r", "--root"}),
}
_CHANGES_DIR = frozenset({"-C", "--chdir", "-D"})
_ENTERS_DIR = frozenset({"-w", "--wd", "-R", "--root", "-r"})  # unshare's, nsenter's
# Programs that run a command string of their own given with -c, as a shell does.
_COMMAND_STRING: dict[str, frozenset[str]] = {
    "su": frozenset({"-s", "--shell", "-g", "--group", "-G", "--supp-group", "-w",
                     "--whitelist-environment"}),
    "runuser": _VALUE_OPTIONS["runuser"],
    "script": frozenset({"-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-B",
                         "--log-io", "-T", "--log-timing", "-m", "--logging-format", "-o",
                         "--output-limit"}),
}


@dataclass(frozen=True)
class Unwrapped:
    program: str  # the basename of what finally runs
    args: tuple[Word, ...]
    from_input: bool = False  # xargs: more arguments come from standard input
    cwd_unknown: bool = False  # env -C, sudo -D: it runs elsewhere
    inner: str | None = None  # env -S, watch, su -c: a command string the wrapper runs


def unwrap(words: Sequence[Word]) -> Unwrapped | Verdict:
    """What runs once the wrappers in front of `words` are taken off."""
    from_input = cwd_unknown = False
    words = list(words)
    while words:
        first = words[0]
        if first.dynamic:
            return unknown(f"the command's name is computed when it runs ({first.text})")
        program = posixpath.basename(first.text)
        if program in _COMMAND_STRING and not (program == "runuser" and _names_user(words)):
            return _command_string(program, words[1:])
        if program not in _VALUE_OPTIONS:
            return Unwrapped(program, tuple(words[1:]), from_input, cwd_unknown)
        if program == "command" and any(w.text in ("-v", "-V") for w in words[1:2]):
            return SAFE  # a lookup, nothing runs
        rest, moved, inner = _after_options(program, words[1:])
        if inner is not None:
            return Unwrapped(program, (), inner=inner)
        if program == "xargs":
            rest = _input_words(words[1:], rest)
        from_input = from_input or program == "xargs"
        cwd_unknown = cwd_unknown or moved or program == "chroot"
        if program == "watch":
            return Unwrapped(program, (), inner=" ".join(w.text for w in rest))
        words = rest
    return SAFE  # a wrapper alone (`sudo -v`, `env`): it runs nothing else


def _names_user(words: Sequence[Word]) -> bool:
    """`runuser -u USER [--] COMMAND`: a wrapper; without -u it takes su's -c string."""
    return any(w.text in ("-u", "--user") or w.text.startswith("--user=") for w in words[1:])


def _command_string(program: str, args: Sequence[Word]) -> Unwrapped | Verdict:
    """su, runuser USER, script: the string after -c/--command, or unknown without one (a
    shell of another user reading its input, or a terminal session)."""
    values = _COMMAND_STRING[program]
    i = 0
    while i < len(args):
        text = args[i].text
        if text in ("-c", "--command") and i + 1 < len(args):
            string = args[i + 1]
            if string.dynamic:
                return unknown(f"{program} -c with a string computed when the command runs")
            return Unwrapped(program, (), inner=string.text)
        if text.startswith("--command="):
            if args[i].dynamic:
                return unknown(f"{program} -c with a string computed when the command runs")
            return Unwrapped(program, (), inner=text.split("=", 1)[1])
        i += 2 if text in values else 1
    return unknown(f"{program} starts a shell whose commands are not in the text")


def _input_words(options: Sequence[Word], rest: list[Word]) -> list[Word]:
    """xargs -I R (or -i, --replace): the words holding R are made from its input."""
    token = None
    own = options[:len(options) - len(rest)]
    for i, arg in enumerate(own):
        text = arg.text
        if text == "-I" and i + 1 < len(own):
            token = own[i + 1].text
        elif text.startswith("-I") and len(text) > 2:
            token = text[2:]
        elif text == "-i" or text == "--replace":
            token = "{}"
        elif text.startswith(("-i", "--replace=")):
            token = text.split("=", 1)[1] if text.startswith("--") else text[2:]
    if not token:
        return rest
    return [Word(w.text, True, w.fetches) if token in w.text else w for w in rest]


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
        moved = moved or name in _CHANGES_DIR or \
            (program in ("unshare", "nsenter") and name in _ENTERS_DIR)
        i += 2 if text in values else 1
    rest = args[i:]
    if program == "timeout" and rest:
        rest = rest[1:]  # the duration
    if program in ("flock", "chroot") and rest:
        rest = rest[1:]  # the lock file, the new root
    return rest, moved, None
