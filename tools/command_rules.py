"""The dangerous-command rules, each over one program's arguments as the shell passes them.

`Call` is one program run: its name and arguments (wrappers such as sudo or env already
taken off), the directory it runs in and the workspace. A rule answers a Verdict or None.
"""

from __future__ import annotations

import getpass
import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kanban.tools.shellparse import UNKNOWN_DIR, Word, home_relative, join

RECURSIVE_DELETE = "recursive delete outside the workspace"
MOVE_OUTSIDE = "move outside the workspace"
FORCE_PUSH = "force push"
GIT_CONFIG = "git config write"
GIT_PROGRAM = "git setting that runs a program"
GIT_INTERNALS = "write into git hooks or config"
STARTUP_FILE = "write to a shell start-up file"
UNDER_ETC = "write under /etc"
KILL_ALL = "killing every process"
OTHER_USERS = "killing another user's processes"
OUTLIVES = "a command handed to a service that outlives the card"


@dataclass(frozen=True)
class Verdict:
    """What the gate makes of a command: safe, unknown (with why) or dangerous (the rule)."""

    kind: Literal["safe", "unknown", "dangerous"]
    why: str = ""  # the rule's name for dangerous; the reason for unknown

    @property
    def safe(self) -> bool:
        return self.kind == "safe"

    @property
    def dangerous(self) -> bool:
        return self.kind == "dangerous"


SAFE = Verdict("safe")


def danger(rule: str) -> Verdict:
    return Verdict("dangerous", rule)


def unknown(reason: str) -> Verdict:
    return Verdict("unknown", reason)


@dataclass(frozen=True)
class Call:
    program: str  # the basename of the first word
    args: tuple[Word, ...]
    cwd: str = "."
    workspace: Path | None = None

    @property
    def texts(self) -> list[str]:
        return [a.text for a in self.args]

    def place(self, word: Word) -> str:
        """Where a path argument points: "inside", "outside" or "unknown"."""
        return place(word, self.cwd, self.workspace)


def place(word: Word, cwd: str, workspace: Path | None) -> str:
    text = word.text
    if word.dynamic:
        home = home_relative(text)
        if home is None:
            return "unknown"
        text = home
    path = join(cwd, text)
    if path == UNKNOWN_DIR:
        return "unknown"
    if path.startswith("~"):
        return "outside"
    if path.startswith("/"):
        if workspace is not None and _under(path, str(workspace)):
            return "inside"
        return "outside"
    return "outside" if path == ".." or path.startswith("../") else "inside"


def _under(path: str, root: str) -> bool:
    root = posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _operands(args: Sequence[Word]) -> list[Word]:
    out, options = [], True
    for arg in args:
        if options and arg.text == "--":
            options = False
        elif not (options and arg.text.startswith("-") and arg.text != "-"):
            out.append(arg)
    return out


def _has_short(args: Sequence[Word], letters: str, long: Sequence[str] = ()) -> bool:
    for arg in args:
        text = arg.text
        if text == "--":
            return False
        if text in long or any(text.startswith(f"{opt}=") for opt in long):
            return True
        if text.startswith("-") and not text.startswith("--") and \
                any(ch in text[1:] for ch in letters):
            return True
    return False


def _worst(places: Sequence[str], rule: str, what: str) -> Verdict | None:
    if "outside" in places:
        return danger(rule)
    if "unknown" in places:
        return unknown(f"{what} a path known only when the command runs")
    return None


def rm_rule(call: Call) -> Verdict | None:
    if not _has_short(call.args, "rR", ("--recursive",)):
        return None
    return _worst([call.place(t) for t in _operands(call.args)], RECURSIVE_DELETE,
                  "rm -r of")


def mv_rule(call: Call) -> Verdict | None:
    operands = _operands(call.args)
    target = next((a.text.split("=", 1)[1] for a in call.args
                   if a.text.startswith("--target-directory=")), None)
    places = [call.place(o) for o in operands]
    if target is not None:
        places.append(call.place(Word(target)))
    return _worst(places, MOVE_OUTSIDE, "mv of")


_PUSH_FORCE = ("--force", "--force-with-lease", "--force-if-includes")


def git_rule(call: Call) -> Verdict | None:
    args = list(call.args)
    while args and args[0].text.startswith("-"):
        option = args.pop(0).text
        if option in ("-c", "--config-env") and args:
            option = "-c" + args.pop(0).text
        if option.startswith("-c") and _runs_program(option[2:].split("=", 1)[0]):
            return danger(GIT_PROGRAM)
        if option in ("-C", "--git-dir", "--work-tree", "--namespace", "--exec-path") and args:
            args.pop(0)
    if not args:
        return None
    sub, rest = args[0].text, args[1:]
    if sub == "push":
        return _push(rest)
    if sub == "config":
        return None if _config_read(rest) else danger(GIT_CONFIG)
    return None


def git_environment(words: Sequence[Word]) -> Verdict | None:
    """`GIT_CONFIG_KEY_0=core.hooksPath ... git commit`: `git -c` spelled as variables."""
    for word in words:
        name, _, value = word.text.partition("=")
        if name == "GIT_CONFIG_PARAMETERS" or (name.startswith("GIT_CONFIG_KEY_") and
                                               _runs_program(value)):
            return danger(GIT_PROGRAM)
    return None


def _runs_program(key: str) -> bool:
    key = key.lower()
    exact = {"core.hookspath", "core.fsmonitor", "core.sshcommand", "core.gitproxy",
             "core.editor", "core.pager", "core.askpass", "sequence.editor", "diff.external",
             "credential.helper", "gpg.program", "uploadpack.packobjectshook", "include.path"}
    parts = key.split(".")
    return key in exact or parts[0] in ("alias", "includeif", "filter") or \
        (parts[0] in ("diff", "merge") and parts[-1] in ("textconv", "command", "driver")) or \
        (parts[0] == "remote" and parts[-1] in ("uploadpack", "receivepack")) or \
        (parts[0] == "gpg" and parts[-1] == "program") or parts[-1] == "sshcommand"


def _push(args: Sequence[Word]) -> Verdict | None:
    texts = [a.text for a in args]
    if "--mirror" in texts:
        return danger("mirror push")
    if any(t in _PUSH_FORCE or t.startswith(tuple(f"{f}=" for f in _PUSH_FORCE))
           for t in texts) or _has_short(args, "f"):
        return danger(FORCE_PUSH)
    refspecs = [a.text for a in _operands(args)][1:]
    if any(r.startswith("+") for r in refspecs):
        return danger(FORCE_PUSH)
    if "--delete" in texts or _has_short(args, "d") or any(r.startswith(":") for r in refspecs):
        return danger("deleting a remote branch")
    if "--prune" in texts:
        return danger("deleting remote branches (push --prune)")
    return None


_CONFIG_READS = {"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color",
                 "--get-colorbool", "--list", "-l"}
_CONFIG_WRITES = {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section",
                  "--remove-section", "--edit", "-e"}
_CONFIG_VALUES = {"--file", "-f", "--blob", "--type", "--default", "--comment", "--value"}


def _config_read(args: Sequence[Word]) -> bool:
    texts = [a.text for a in args]
    if any(t in _CONFIG_WRITES for t in texts):
        return False
    if any(t in _CONFIG_READS for t in texts):
        return True
    positional, skip = [], False
    for text in texts:
        if skip:
            skip = False
        elif text in _CONFIG_VALUES:
            skip = True
        elif not text.startswith("-"):
            positional.append(text)
    if positional and positional[0] in ("get", "list"):
        return True
    if positional and positional[0] in ("set", "unset", "rename-section", "remove-section",
                                        "edit"):
        return False
    return len(positional) <= 1


def rsync_rule(call: Call) -> Verdict | None:
    if any(t.startswith(("--delete", "--del", "--remove-source-files")) for t in call.texts):
        return danger("rsync that deletes (--delete)")
    return None


def kill_rule(call: Call) -> Verdict | None:
    """`kill -9 -1`, `kill -- -1`, `kill -s KILL -1`: every process the user may signal;
    a literal pid (or group) of another user's process, or init's."""
    texts = call.texts
    skip = 2 if texts[:1] in (["-s"], ["-n"]) else \
        1 if texts[:1] and texts[0].startswith("-") and texts[0] != "--" else 0
    targets = [t for t in texts[skip:] if t != "--"]
    if "-1" in targets:
        return danger(KILL_ALL)
    dynamic = [a for a in call.args[skip:] if a.dynamic and a.text not in ("$$", "$!")]
    if dynamic and os.geteuid() == 0:  # root may signal anyone's: whose is unknown
        return unknown("kill, as root, of a pid known only when the command runs")
    for target in targets:
        pid = target.lstrip("-")
        if pid.isdigit() and int(pid) == 1:
            return danger("killing init (pid 1)")
        if pid.isdigit() and _owner(int(pid)) not in (None, os.getuid()):
            return danger(OTHER_USERS)
    return None


def _owner(pid: int) -> int | None:
    """Who owns process `pid` on this host, or None when there is none."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except (OSError, ValueError):
        return None


_MATCH_ALL = {".", ".*", "^", "", "^.*", ".+", "*"}


def pkill_rule(call: Call) -> Verdict | None:
    texts = call.texts
    me = getpass.getuser()
    for i, text in enumerate(texts):
        user, word = None, None
        if text in ("-u", "-U", "--user", "--euid", "--uid") and i + 1 < len(texts):
            user, word = texts[i + 1], call.args[i + 1]
        elif text.startswith(("--user=", "--uid=", "--euid=")):
            user, word = text.split("=", 1)[1], call.args[i]
        if user is not None and word is not None and word.dynamic:  # $(id -un), $USER...
            return unknown("pkill of a user known only when the command runs")
        if user is not None and any(u not in (me, str(os.getuid())) for u in user.split(",")):
            return danger(OTHER_USERS)
    patterns = _operands(call.args)
    flags_with_value = {"-u", "-U", "-s", "--signal", "-g", "-G", "-P", "-t", "--user",
                        "-n", "-o", "--older-than", "--younger-than", "-y"}
    values = {texts[i + 1] for i, t in enumerate(texts[:-1]) if t in flags_with_value}
    patterns = [p for p in patterns if p.text not in values]
    if any(p.text in _MATCH_ALL for p in patterns):
        return danger(KILL_ALL)
    mine = any(t in ("-u", "-U", "--user", "--euid", "--uid") or
               t.startswith(("--user=", "--uid=", "--euid=")) for t in texts)
    if patterns and os.geteuid() == 0 and not mine:  # by name, as root: everyone's
        return danger(OTHER_USERS + " (by name, as root)")
    return None


def scheduler_rule(call: Call) -> Verdict | None:
    """at, batch, crontab, systemd-run, tmux and screen servers run a command after the
    card's processes are gone, outside its sandbox: what a daemon cannot do, they do."""
    texts = call.texts
    if call.program == "crontab" and set(texts) <= {"-l", "-u"} | set(texts[1:2]) and \
            "-l" in texts:
        return None  # a listing
    if call.program in ("at", "atq") and (call.program == "atq" or
                                          set(texts) & {"-l", "-c", "-r", "-d"}):
        return None  # listing, showing or removing jobs
    if call.program == "tmux" and not set(texts) & _TMUX_RUNS:
        return None  # ls, attach, kill-server...
    if call.program == "screen" and not any(t.startswith("-") and set(t[1:]) & set("dDmX")
                                            for t in texts):
        return None
    return danger(OUTLIVES)


_TMUX_RUNS = frozenset({"new-session", "new", "new-window", "neww", "split-window", "splitw",
                        "send-keys", "send", "run-shell", "run", "respawn-pane", "respawnp",
                        "respawn-window", "respawnw", "if-shell", "if", "pipe-pane",
                        "pipep", "source-file", "source", "set-hook", "display-popup",
                        "popup"})


def builder_rule(call: Call) -> Verdict | None:
    """GNU parallel builds its commands from arguments and input."""
    return unknown(f"{call.program} builds the commands it runs from its input")


def awk_rule(call: Call) -> Verdict | None:
    """awk programs may run commands: system(), print | "cmd", "cmd" | getline."""
    args, i = call.args, 0
    while i < len(args) and args[i].text.startswith("-") and args[i].text != "--":
        if args[i].text in ("-f", "--file"):
            return None  # the program is a file (the workspace's own)
        i += 2 if args[i].text in ("-v", "-F", "--assign", "--field-separator") else 1
    i += 1 if i < len(args) and args[i].text == "--" else 0
    program = args[i] if i < len(args) else None
    if program is not None and (program.dynamic or "system" in program.text or
                                "|" in program.text):
        return unknown(f"an {call.program} program that may run commands")
    return None


def truncating_rule(call: Call) -> Verdict | None:
    return danger(f"{call.program} (destroys file contents)")


RULES: dict[str, Callable[[Call], Verdict | None]] = {
    "rm": rm_rule, "mv": mv_rule, "git": git_rule, "rsync": rsync_rule, "kill": kill_rule,
    "pkill": pkill_rule, "killall": pkill_rule, "shred": truncating_rule,
    "truncate": truncating_rule,
    **dict.fromkeys(("at", "batch", "crontab", "systemd-run", "tmux", "screen"),
                    scheduler_rule),
    "parallel": builder_rule,
    **dict.fromkeys(("awk", "gawk", "mawk", "nawk"), awk_rule),
}
