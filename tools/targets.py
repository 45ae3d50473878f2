"""Where a command writes, and which of those places are off limits: git's hooks, config
and info (a hook runs with the user's rights on their next commit), shell start-up files
(run at every login), /etc and block devices. Plus the rules that need no path at all."""

from __future__ import annotations

import re

from kanban.tools.command_rules import (
    GIT_INTERNALS,
    STARTUP_FILE,
    UNDER_ETC,
    Call,
    Verdict,
    danger,
)
from kanban.tools.shellparse import UNKNOWN_DIR, Word, home_relative, join

_STARTUP = frozenset({".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
                      ".zshrc", ".zprofile", ".zshenv", ".zlogin", ".zlogout", ".kshrc",
                      ".cshrc", ".tcshrc", ".login", ".mkshrc", "config.fish"})
_ETC_STARTUP = ("/etc/profile", "/etc/bash.bashrc", "/etc/bashrc", "/etc/zsh", "/etc/zprofile",
                "/etc/zshrc", "/etc/environment")
_BLOCK_DEVICE = re.compile(r"^/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|dm-|loop|md|disk|sr)")
_SYSTEM = re.compile(r"^(?:/|/\*|~.*|/(?:etc|usr|bin|sbin|lib|lib32|lib64|boot|var|sys|proc|"
                     r"dev|root|home|opt|srv|run)(?:/.*)?)$")
_SHUTDOWN = frozenset({"shutdown", "reboot", "halt", "poweroff"})
_SYSTEMCTL_DOWN = frozenset({"reboot", "poweroff", "halt", "kexec", "emergency", "rescue",
                             "suspend", "hibernate"})


def write_verdict(target: Word, cwd: str) -> Verdict:
    """Writing to `target` (a redirection, cp's destination, tee's file...)."""
    text = target.text
    if target.dynamic:
        home = home_relative(text)
        if home is None:
            return Verdict("safe")  # `> "$out"`: its value is not known here
        text = home
    path = join(cwd, text)
    if path == UNKNOWN_DIR:
        return Verdict("safe")
    parts = path.split("/")
    if parts[-1] in _STARTUP or path.startswith(_ETC_STARTUP):
        return danger(STARTUP_FILE)
    for i, part in enumerate(parts):
        if part == ".git" and (i == len(parts) - 1 or parts[i + 1] in ("hooks", "config",
                                                                          "info")):
            return danger(GIT_INTERNALS)
    if path == "/etc" or path.startswith("/etc/"):
        return danger(UNDER_ETC)
    if _BLOCK_DEVICE.match(path):
        return danger("write to a block device")
    return Verdict("safe")


def written_paths(call: Call) -> list[Word]:
    """The paths `call` writes to, as far as its arguments say."""
    args = list(call.args)
    texts = [a.text for a in args]
    operands = [a for a in args if not a.text.startswith("-") or a.text == "-"]
    program = call.program
    if program in ("cp", "mv", "ln", "install", "rsync", "scp"):
        for i, text in enumerate(texts):
            if text in ("-t", "--target-directory") and i + 1 < len(args):
                return [args[i + 1]]
            if text.startswith("--target-directory="):
                return [Word(text.split("=", 1)[1], args[i].dynamic)]
        return operands[-1:] if len(operands) > 1 else []
    if program == "tee":
        return operands
    if program == "sed" and any(t.startswith(("-i", "--in-place")) or
                                (t.startswith("-") and not t.startswith("--") and "i" in t)
                                for t in texts):
        scripted = any(t in ("-e", "-f", "--expression", "--file") for t in texts)
        return operands if scripted else operands[1:]
    if program in ("chmod", "chown", "chgrp"):
        return operands[1:]
    if program == "dd":
        return [Word(a.text[3:], a.dynamic) for a in args if a.text.startswith("of=")]
    if program in ("curl", "wget"):
        flags = ("-o", "--output") if program == "curl" else ("-O", "--output-document")
        return [args[i + 1] for i, t in enumerate(texts[:-1]) if t in flags]
    return []


def program_rule(call: Call) -> Verdict | None:
    """The rules about a program itself: formatting disks, shutting down, dd to a device,
    recursive permission changes of system paths."""
    program, texts = call.program, call.texts
    if program.startswith("mkfs") or program in ("mke2fs", "mkswap", "wipefs"):
        return danger("mkfs (formats a filesystem)")
    if program in _SHUTDOWN or (program in ("init", "telinit") and texts[:1] in (["0"], ["6"])) \
            or (program == "systemctl" and _SYSTEMCTL_DOWN & set(texts)):
        return danger("shutdown or reboot")
    if program == "killall5":
        return danger("killing every process")
    if program == "dd" and any(t.startswith("of=/dev/") and t not in (
            "of=/dev/null", "of=/dev/zero", "of=/dev/stdout", "of=/dev/stderr") for t in texts):
        return danger("dd to a device")
    if program in ("chmod", "chown", "chgrp") and any(
            t == "--recursive" or (t.startswith("-") and not t.startswith("--") and "R" in t)
            for t in texts):
        operands = [t for t in texts if not t.startswith("-")][1:]
        if any(_SYSTEM.match(t) for t in operands):
            return danger("recursive chmod/chown of a system path")
    return None
