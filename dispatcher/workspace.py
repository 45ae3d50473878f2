"""A claimed card's working directory, made ready by the dispatcher before its worker
starts (a git worktree is checked out there; a `dir:` must exist)."""

from __future__ import annotations

import logging
from pathlib import Path

from kanban import claims, transitions
from kanban import workspaces as ws
from kanban.dispatcher.logs import event
from kanban.errors import KanbanError, ValidationError
from kanban.records import Claim
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.errors import TransientDatabaseError
from kanban.transitions import Actor


def ready_workspace(kb: Kanban, claim: Claim, *, home: Path, config: Config,
                    actor: Actor) -> ws.Workspace | None:
    """The card's workspace, made ready; a spec that cannot be met fails the card (while
    the claim is still current) with the reason, and None is returned."""
    (home / "workspaces" / claim.board).mkdir(mode=0o700, exist_ok=True)  # each level private
    try:
        with kb.db.read() as conn:
            workspace = ws.resolve(conn, claim.card_id, home, config.workspaces())
        if workspace.kind == ws.WORKTREE:
            from kanban.tools.worktree import prepare

            workspace = prepare(workspace, home)  # with the git folders it recorded
        elif workspace.kind == ws.DIR and not workspace.path.is_dir():
            raise ValidationError(f"workspace dir:{workspace.path} is not a directory")
    except TransientDatabaseError:
        raise  # the database, not the spec: the loop waits the outage out
    except KanbanError as exc:
        event(f"#{claim.card_id}: workspace: {exc}", logging.ERROR,
              kind="workspace_failed", card=claim.card_id, error=str(exc))
        with kb.db.write() as conn:
            if claims.is_current(conn, claim.card_id, claim.claim_token):
                transitions.fail(conn, claim.card_id, f"workspace: {exc.message}",
                                 now=kb.clock(), actor=actor)
        return None
    return workspace
