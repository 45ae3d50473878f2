"""Card workspaces: the directory a card's worker runs in, from the card's workspace spec.

Specs (the `card.workspace` column; NULL means scratch):

- `scratch`: `workspaces/<board>/<card>/` beside the database, kept after the run;
- `dir:PATH`: an existing directory (stored absolute);
- `worktree`: a git worktree of the repository holding the database's folder, on branch
  `kanban/<card>`, checked out at `workspaces/<board>/<card>/`;
- `parent`: the resolved directory of the card's parent.

Resolving reads the board only; making the directory (and running git) is the
dispatcher's job (`kanban.tools.worktree`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kanban.errors import ValidationError
from kanban.state.plans import Plan, Query, run_plan
from kanban.state.store import Conn

SCRATCH, DIR, WORKTREE, PARENT = "scratch", "dir", "worktree", "parent"
KINDS = (SCRATCH, DIR, WORKTREE, PARENT)
MAX_SPEC = 4096
_MAX_CHAIN = 64  # a longer chain of `parent` specs is a corrupt board, not a deep tree
# The workspace the dispatcher resolved (and made) for a worker, as JSON: the worker does
# not read the board again for it.
WORKSPACE_ENV = "KANBAN_RESOLVED_WORKSPACE"


@dataclass(frozen=True)
class WorkspaceSpec:
    kind: str
    path: str | None = None  # dir: only

    def __str__(self) -> str:
        return f"dir:{self.path}" if self.kind == DIR else self.kind


@dataclass(frozen=True)
class GitPaths:
    """A worktree's git folders as the dispatcher recorded them when it made the worktree;
    never read from the workspace (a `.git` file there is the model's to write)."""

    git_dir: Path  # <common_dir>/worktrees/<name>: this worktree's HEAD, index and logs
    common_dir: Path  # the shared repository's git folder: objects, refs, config, hooks
    base: str  # the commit the branch started from (an object id)

    def to_json(self) -> dict[str, str]:
        return {"git_dir": str(self.git_dir), "common_dir": str(self.common_dir),
                "base": self.base}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GitPaths:
        return cls(Path(str(data["git_dir"])), Path(str(data["common_dir"])),
                   str(data["base"]))


@dataclass(frozen=True)
class Workspace:
    """A resolved workspace: where a card's worker runs and what kind of place it is."""

    card_id: int  # the card that owns the directory (the ancestor, for `parent`)
    kind: str
    path: Path
    branch: str | None = None  # worktree only
    git: GitPaths | None = None  # worktree only, once the dispatcher has made it

    def to_json(self) -> dict[str, object]:
        return {"card_id": self.card_id, "kind": self.kind, "path": str(self.path),
                "branch": self.branch, "git": self.git and self.git.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Workspace:
        """The workspace `to_json` described; ValueError when `data` is not one."""
        try:
            branch, git = data["branch"], data.get("git")
            return cls(int(data["card_id"]), str(data["kind"]), Path(str(data["path"])),
                       None if branch is None else str(branch),
                       None if git is None else GitPaths.from_json(git))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a workspace: {exc}") from None


def parse_spec(text: str | None) -> WorkspaceSpec:
    """The spec of `text` (None or "" is scratch); a bad spec raises ValidationError."""
    if text is None or text == "" or text == SCRATCH:
        return WorkspaceSpec(SCRATCH)
    if len(text) > MAX_SPEC or "\x00" in text:
        raise ValidationError("workspace spec is too long or holds a NUL byte")
    if text in (WORKTREE, PARENT):
        return WorkspaceSpec(text)
    if text.startswith("dir:") and text[4:].strip():
        return WorkspaceSpec(DIR, text[4:])
    raise ValidationError(f"unknown workspace {text!r}: use scratch, worktree, parent or "
                          "dir:PATH")


def normalise_spec(text: str | None, *, base: Path, has_parent: bool) -> str | None:
    """The stored form of a spec given by a person or an agent: None for scratch, `dir:`
    made absolute (relative to `base`) and checked to be an existing directory."""
    spec = parse_spec(text)
    if spec.kind == SCRATCH:
        return None
    if spec.kind == PARENT and not has_parent:
        raise ValidationError("workspace 'parent' needs a parent card (it shares the "
                              "parent's directory)")
    if spec.kind == DIR:
        path = (base / Path(spec.path or "").expanduser()).resolve()
        if not path.is_dir():
            raise ValidationError(f"workspace dir:{spec.path} is not an existing directory")
        return f"dir:{path}"
    return str(spec)


def scratch_dir(home: Path, board: str, card_id: int) -> Path:
    return home / "workspaces" / board / str(card_id)


def resolve(conn: Conn, card_id: int, home: Path,
            defaults: Mapping[str, str | None] | None = None) -> Workspace:
    """Where card `card_id` works. `defaults` maps profile names to their workspace spec,
    used for cards that name none."""
    return run_plan(conn, resolve_plan(card_id, home, defaults))


def resolve_plan(card_id: int, home: Path,
                 defaults: Mapping[str, str | None] | None = None) -> Plan[Workspace]:
    defaults = defaults or {}
    current = card_id
    for _ in range(_MAX_CHAIN):
        rows = yield Query("SELECT board, profile, workspace, parent_id FROM card "
                           "WHERE id = :id", {"id": current})
        if not rows:
            raise ValidationError(f"no card #{current} to resolve a workspace for")
        board, profile, stored, parent_id = rows[0]
        spec = parse_spec(stored if stored is not None else defaults.get(profile))
        if spec.kind == PARENT:
            if parent_id is None:
                raise ValidationError(f"card #{current} has workspace 'parent' but no parent")
            current = parent_id
            continue
        if spec.kind == DIR:
            return Workspace(current, DIR, Path(spec.path or ""))
        branch = f"kanban/{current}" if spec.kind == WORKTREE else None
        return Workspace(current, spec.kind, scratch_dir(home, board, current), branch)
    raise ValidationError(f"card #{card_id}: the chain of 'parent' workspaces is too long")
