"""`kanban gc`: old finished cards are archived and pruned in bounded batches; nothing else
is touched, and the freed pages go back to the file system."""

from __future__ import annotations

import os
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from kanban import claims, gc
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.sandbox_paths import card_home_path
from kanban.state.store import Database
from kanban.tools import worktree
from kanban.tools.worktree_lifecycle import remove_checkout
from kanban.transitions import Actor
from kanban.workspaces import scratch_dir
from tests.support.db import STORES, FakeClock, open_sqlite


def finished_card(kb: Kanban, home: Path, title: str, *, transcript: int = 3,
                  workspace: str | None = None) -> int:
    """A card run once by a 'worker' (transcript, log, scratch workspace), then done."""
    card = kb.add_card(NewCard(title, workspace=workspace))
    claim = kb.claim(1, lease_s=30)[0]
    assert claim.card_id == card.id
    with kb.db.write() as conn:
        for seq in range(transcript):
            claims.append_message(conn, claim.run_id, seq, {"role": "assistant",
                                                            "content": "x" * 2000},
                                  now=kb.clock())
    (home / "logs").mkdir(exist_ok=True)
    (home / "logs" / f"{card.id}-1.log").write_text("worker output\n")
    scratch = scratch_dir(home, "default", card.id)
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "notes.txt").write_text("work\n")
    own_home = card_home_path(home, "default", card.id)  # its sandbox HOME
    own_home.mkdir(parents=True, exist_ok=True)
    (own_home / ".bash_history").write_text("ls\n")
    kb.complete(card.id, "done", actor=Actor("worker", claim.claim_token))
    return card.id


def count(db: Database, sql: str, **params: object) -> int:
    with db.read() as conn:
        return int(conn.scalar(sql, params))


def test_gc_archives_and_prunes_old_finished_cards_in_batches(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = open_sqlite(home / "kanban.db")
    clock = FakeClock()
    kb = Kanban(db, clock=clock)
    try:
        old = [finished_card(kb, home, f"old {n}", transcript=40) for n in range(5)]
        clock.advance(40 * 86400)
        recent = finished_card(kb, home, "recent")
        waiting = kb.add_card(NewCard("not finished")).id
        batches: list[int] = []
        report = gc.collect(db, home, older_than=timedelta(days=30), now=clock.now, batch=2,
                            on_batch=lambda r: batches.append(r.archived))
        assert report.archived == 5 and batches == [2, 4, 5]  # bounded transactions
        assert report.messages == 5 * 40 and report.logs == 5 and report.workspaces == 5
        for card_id in old:
            assert kb.card(card_id).archived_at is not None
            assert not (home / "logs" / f"{card_id}-1.log").exists()
            assert not scratch_dir(home, "default", card_id).exists()
            assert not card_home_path(home, "default", card_id).exists()
            # one event stays: the archive, saying what went
            assert count(db, "SELECT count(*) FROM event WHERE card_id = :c", c=card_id) == 1
        assert kb.card(recent).archived_at is None
        assert (home / "logs" / f"{recent}-1.log").exists()
        assert card_home_path(home, "default", recent).exists()
        assert count(db, "SELECT count(*) FROM message m JOIN run r ON r.id = m.run_id "
                         "WHERE r.card_id = :c", c=recent) == 3
        assert kb.card(waiting).status == "ready"
        assert report.pages_freed > 0  # a new file vacuums incrementally
        with db.read() as conn:
            assert int(conn.scalar("PRAGMA freelist_count")) == 0
            assert conn.scalar("SELECT sum(n) FROM card_count WHERE board = 'default' AND "
                               "status = 'done'") == 1
        again = gc.collect(db, home, older_than=timedelta(days=30), now=clock.now)
        assert again.archived == 0 and again.batches == 0
    finally:
        db.dispose()


def test_gc_leaves_other_directories_alone(tmp_path: Path) -> None:
    """A `dir:` workspace is the user's: never removed; a symlinked log is not followed."""
    home = tmp_path / "home"
    db = open_sqlite(home / "kanban.db")
    clock = FakeClock()
    kb = Kanban(db, clock=clock)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep\n")
    try:
        card_id = finished_card(kb, home, "own dir", workspace=f"dir:{mine}")
        log = home / "logs" / f"{card_id}-1.log"
        log.unlink()
        outside = tmp_path / "outside.log"
        outside.write_text("not kanban's\n")
        os.symlink(outside, log)
        clock.advance(40 * 86400)
        report = gc.collect(db, home, older_than=timedelta(days=30), now=clock.now)
        assert report.archived == 1 and report.workspaces == 0 and report.logs == 0
        assert (mine / "keep.txt").exists() and outside.exists()
    finally:
        db.dispose()


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_gc_on_every_store(kb: Kanban, db: Database, clock: FakeClock, tmp_path: Path) -> None:
    old = [finished_card(kb, tmp_path, f"old {n}") for n in range(3)]
    clock.advance(31 * 86400)
    kept = finished_card(kb, tmp_path, "recent")
    report = gc.collect(db, tmp_path, older_than=timedelta(days=30), now=clock.now, batch=2)
    assert (report.archived, report.batches, report.messages) == (3, 2, 9)
    assert [kb.card(i).archived_at is not None for i in [*old, kept]] == [True] * 3 + [False]
    with db.read() as conn:
        assert conn.column("SELECT kind FROM event WHERE card_id = :c", {"c": old[0]}) == [
            "archived"]
        assert conn.scalar("SELECT sum(n) FROM card_count WHERE board = 'default' AND "
                           "status = 'done'") == 1


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def test_gc_removes_a_worktree_and_keeps_its_branch(tmp_path: Path) -> None:
    """Issue 29: a worktree card's checkout leaves `git worktree list` when gc prunes it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main", cwd=repo)
    (repo / "README").write_text("hi\n")
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1", cwd=repo)
    home = repo / ".kanban"
    db = open_sqlite(home / "kanban.db")
    clock = FakeClock()
    kb = Kanban(db, clock=clock)
    try:
        card = kb.add_card(NewCard("in a worktree", workspace="worktree"))
        claim = kb.claim(1, lease_s=30)[0]
        ws = kb.workspace(card.id, home)
        ws = worktree.prepare(ws, home)
        (ws.path / "feature.txt").write_text("new\n")
        worktree.finish(ws, "kanban #1")
        kb.complete(card.id, "done", actor=Actor("worker", claim.claim_token))
        clock.advance(40 * 86400)
        report = gc.collect(db, home, older_than=timedelta(days=30), now=clock.now,
                            remove_worktree=lambda path: remove_checkout(home, path))
        assert (report.archived, report.worktrees) == (1, 1)
        assert not ws.path.exists()
        assert str(ws.path) not in git("worktree", "list", cwd=repo)
        assert git("show", f"{ws.branch}:feature.txt", cwd=repo) == "new\n"
    finally:
        db.dispose()
