"""What the commands do with a card's git worktree: remove it (gc, archive, `workspace
--remove`) and say whether its branch is merged. The git itself is
kanban.tools.worktree_lifecycle's; these only say what happened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kanban.cli import output

if TYPE_CHECKING:
    import click

    from kanban.service import Kanban
    from kanban.workspaces import Workspace


def workspace_defaults(ctx: click.Context) -> dict[str, str | None]:
    """Each profile's default workspace; none when config.toml is broken (this command
    has done its work; `kanban status` says what is wrong with the config)."""
    from kanban.cli.base import config_of
    from kanban.errors import ConfigError

    try:
        return config_of(ctx).workspaces()
    except ConfigError:
        return {}


def remover(home: Path) -> Callable[[Path], bool]:
    """For `kanban gc`: remove one checkout, saying on stderr why one was left."""
    from kanban.errors import KanbanError
    from kanban.tools.worktree_lifecycle import remove_checkout

    def remove(path: Path) -> bool:
        try:
            return remove_checkout(home, path)
        except KanbanError as exc:
            output.note(f"worktree {path} left: {exc.message}")
            return False

    return remove


def card_worktree(kanban: Kanban, card_id: int, home: Path,
                  defaults: dict[str, str | None]) -> Workspace | None:
    """The worktree checked out for this card itself, if its workspace is one."""
    from kanban.errors import ValidationError
    from kanban.tools.worktree_lifecycle import own_checkout

    try:
        ws = kanban.workspace(card_id, home, defaults)
    except ValidationError:
        return None
    return ws if own_checkout(ws, card_id) else None


def remove_after_archive(kanban: Kanban, card_id: int, home: Path,
                         defaults: dict[str, str | None]) -> None:
    """An archived card's worktree goes (its branch stays); a failure is said, not raised:
    the card is archived either way."""
    from kanban.errors import KanbanError
    from kanban.tools.worktree_lifecycle import remove_checkout

    ws = card_worktree(kanban, card_id, home, defaults)
    if ws is None:
        return
    try:
        if remove_checkout(home, ws.path):
            output.note(f"removed worktree {ws.path} (branch {ws.branch} kept)")
    except KanbanError as exc:
        output.note(f"worktree {ws.path} left: {exc.message}")
