"""kanban's own git commands, hardened: the one place that builds their environment.

A card's worktree is the model's to write: its `.git` file, its admin folder (`commondir`,
`gitdir`, `config.worktree`), its `.gitattributes`, nested repositories. So kanban's git
takes its folders from what the dispatcher recorded (GIT_DIR, GIT_COMMON_DIR,
GIT_WORK_TREE: a planted `.git` file or `commondir` is not followed) and runs no hook,
fsmonitor, pager, editor, credential helper, ssh command, external diff, textconv or
filter driver; it reads no system config and speaks no transport protocol.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kanban.state.errors import KanbanError

GIT_TIMEOUT_S = 120
NO_HOOKS = "/dev/null"  # core.hooksPath: `/dev/null/<hook>` never exists
PASS_THROUGH = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME")
# Settings that beat every config file (command-line scope), whatever a file says.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", NO_HOOKS),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("credential.helper", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("protocol.allow", "never"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("submodule.recurse", "false"),
)
FILTER_KEYS = (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false"))
FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_ATTR_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat", "PAGER": "cat", "GIT_EDITOR": "false", "GIT_ASKPASS": "",
    "SSH_ASKPASS": "", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_PROTOCOL_FROM_USER": "0",
    "GIT_OPTIONAL_LOCKS": "0",
}
Wrap = Callable[[Sequence[str], Path], list[str]]  # a runner's `wrap` (the sandbox)


class GitError(KanbanError):
    """git is missing, failed or took too long."""


def as_is(argv: Sequence[str], cwd: Path) -> list[str]:
    return list(argv)


@dataclass(frozen=True)
class Git:
    """Hardened git on one repository. `git_dir`/`common_dir`/`work_tree` None: git finds
    the repository from `cwd` (only for the user's own repository, never a worktree)."""

    cwd: Path
    git_dir: Path | None = None
    common_dir: Path | None = None
    work_tree: Path | None = None
    wrap: Wrap = as_is  # where the command runs: as is, or inside the card's sandbox
    filters: tuple[str, ...] = field(default=())  # configured filter drivers, switched off

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a hardened git: nothing else of ours is inherited."""
        base = os.environ if base is None else base
        out = {k: base[k] for k in PASS_THROUGH if k in base}
        out.update({k: v for k, v in base.items() if k.startswith("LC_")})
        out.update(FIXED_ENV)
        for name, path in (("GIT_DIR", self.git_dir), ("GIT_COMMON_DIR", self.common_dir),
                           ("GIT_WORK_TREE", self.work_tree)):
            if path is not None:
                out[name] = str(path)
        pairs = [*SAFE_CONFIG, *((f"filter.{d}.{k}", v) for d in self.filters
                                 for k, v in FILTER_KEYS)]
        out["GIT_CONFIG_COUNT"] = str(len(pairs))
        for i, (key, value) in enumerate(pairs):
            out[f"GIT_CONFIG_KEY_{i}"], out[f"GIT_CONFIG_VALUE_{i}"] = key, value
        return out

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = self.wrap(["git", "--no-pager", *args], self.cwd)
        try:
            proc = subprocess.run(argv, cwd=self.cwd, env=self.env(), capture_output=True,
                                  text=True, timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise GitError("worktree workspaces need git, which is not installed") from None
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took over {GIT_TIMEOUT_S}s") from None
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise GitError(f"git {' '.join(args[:2])} failed: {detail[-1] if detail else ''}")
        return proc

    def without_filters(self) -> Git:
        """This git with every filter driver its config names switched off (a model's
        `.gitattributes` may name any of them)."""
        listed = self.run("config", "--name-only", "--get-regexp", r"^filter\.", check=False)
        drivers = {key[len("filter."):key.rindex(".")] for key in listed.stdout.splitlines()
                   if key.count(".") >= 2}
        return Git(self.cwd, self.git_dir, self.common_dir, self.work_tree, self.wrap,
                   tuple(sorted(drivers)))
