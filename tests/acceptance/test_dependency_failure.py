"""A card that fails in a real worker: its dependents are blocked or cancelled by policy."""

from __future__ import annotations

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import kanban, query


def test_a_failed_card_cancels_and_blocks_its_dependents_by_policy(board: BoardFiles) -> None:
    board.configure('[profiles.bad]\nmodel = "scripted:no-such-script"\n')
    doomed = board.add("doomed", profile="bad", max_attempts=3)

    def add(title: str, *args: str) -> int:
        return int(kanban(board.path, "add", title, *args).stdout.strip().removeprefix("#"))

    cancels = add("cancels", "--depends-on", str(doomed), "--on-dependency-failure", "cancel")
    blocks = add("blocks", "--depends-on", str(doomed))
    below = add("below", "--depends-on", str(cancels))  # the board's default: block
    # the worker fails `doomed` at once: exit 4 (kanban/cli/exit_codes.py)
    assert kanban(board.path, "dispatch", "--once", check=False).returncode == 4
    status = dict(query(board.path, "SELECT id, status FROM card"))
    assert status == {doomed: "failed", cancels: "cancelled", blocks: "blocked",
                      below: "blocked"}
    (error,) = query(board.path, "SELECT error FROM card WHERE id = ?", cancels)[0]
    assert error.startswith(f"dependency #{doomed} failed: ") and "unknown script" in error
    shown = kanban(board.path, "show", str(cancels)).stdout
    assert "dependency_cancelled" in shown and "cancel (this card's setting)" in shown
    kanban(board.path, "retry", str(doomed))  # the blocked ones wait for it again; not this
    status = dict(query(board.path, "SELECT id, status FROM card"))
    assert (status[cancels], status[blocks], status[below]) == ("cancelled", "todo", "blocked")
