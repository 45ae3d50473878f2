"""The file toolset: confined to the workspace, text only, capped, exact edits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kanban.tools.workbench import Workbench
from tests.unit.work.conftest import ok, refused


def test_write_read_edit_round_trip(bench: Workbench, workspace: Path) -> None:
    assert "wrote 13 bytes to notes/a.txt" in ok(bench, "write_file", path="notes/a.txt",
                                                 content="one\ntwo\nthree")
    assert (workspace / "notes" / "a.txt").read_text() == "one\ntwo\nthree"
    shown = ok(bench, "read_file", path="notes/a.txt")
    assert shown.splitlines() == ["notes/a.txt: lines 1-3 of 3", "1\tone", "2\ttwo", "3\tthree"]
    assert "edited notes/a.txt at line 2" in ok(bench, "edit_file", path="notes/a.txt",
                                                old="two", new="TWO")
    assert (workspace / "notes" / "a.txt").read_text() == "one\nTWO\nthree"


def test_read_with_offset_and_limit_says_where_more_is(bench: Workbench,
                                                       workspace: Path) -> None:
    (workspace / "long.txt").write_text("\n".join(f"line {n}" for n in range(1, 51)))
    shown = ok(bench, "read_file", path="long.txt", offset=10, limit=3)
    assert shown.splitlines() == ["long.txt: lines 10-12 of 50 (more: read again with "
                                  "offset=13)", "10\tline 10", "11\tline 11", "12\tline 12"]
    assert "past the end" in refused(bench, "read_file", path="long.txt", offset=99)


@pytest.mark.parametrize(("content", "says"), [
    ("a b a", "matches 2 times"), ("nothing", "not found in f.txt (0 matches)")])
def test_edit_needs_exactly_one_match(bench: Workbench, workspace: Path, content: str,
                                      says: str) -> None:
    (workspace / "f.txt").write_text(content)
    assert says in refused(bench, "edit_file", path="f.txt", old="a", new="b")
    assert (workspace / "f.txt").read_text() == content


@pytest.mark.parametrize("path", ["../outside.txt", "a/../../outside.txt", "/tmp/abs.txt",
                                  "~/home.txt", "/etc/passwd"])
def test_paths_out_of_the_workspace_are_refused(bench: Workbench, workspace: Path,
                                                path: str) -> None:
    for tool, args in (("write_file", {"content": "x"}), ("read_file", {}),
                       ("edit_file", {"old": "r", "new": "x"})):
        message = refused(bench, tool, path=path, **args)
        assert "refused" in message
    assert not (workspace.parent / "outside.txt").exists()


def test_symlinks_pointing_out_are_refused_both_ways(bench: Workbench, workspace: Path,
                                                     tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (workspace / "door").symlink_to(outside)
    (workspace / "file-link").symlink_to(outside / "secret.txt")
    assert "outside the workspace" in refused(bench, "write_file", path="door/evil.txt",
                                              content="x")
    assert "outside the workspace" in refused(bench, "read_file", path="file-link")
    assert "outside the workspace" in refused(bench, "write_file", path="file-link",
                                              content="x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"
    listing = ok(bench, "list_files")
    assert "door -> " in listing  # listed, never followed
    assert ok(bench, "search_files", regex="secret") == "no matches for 'secret'"


def test_devices_fifos_and_binaries_are_refused(bench: Workbench, workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    assert "not a regular file" in refused(bench, "read_file", path="pipe")
    assert "not a regular file" in refused(bench, "write_file", path="pipe", content="x")
    (workspace / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    assert "looks binary" in refused(bench, "read_file", path="blob.bin")
    (workspace / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert "not UTF-8" in refused(bench, "read_file", path="latin.txt")
    assert "is a directory" in refused(bench, "read_file", path=".")


def test_size_caps_come_from_the_profile(bench: Workbench, workspace: Path) -> None:
    assert "over the 10,000-byte limit" in refused(bench, "write_file", path="big.txt",
                                                   content="x" * 10_001)
    (workspace / "big.txt").write_text("y" * 20_000)
    assert "files over 10,000 bytes are refused" in refused(bench, "read_file", path="big.txt")
    assert not (workspace / "big.txt").read_text().startswith("x")


def test_long_results_keep_head_and_tail_and_are_saved(bench: Workbench,
                                                       workspace: Path) -> None:
    (workspace / "many.txt").write_text("\n".join(f"row {n}" for n in range(300)))
    shown = ok(bench, "read_file", path="many.txt")
    assert "row 0" in shown and "row 299" in shown and "row 150" not in shown
    saved = next((workspace / ".kanban-outputs").iterdir())
    assert f".kanban-outputs/{saved.name}" in shown and "row 150" in saved.read_text()


def test_list_and_search(bench: Workbench, workspace: Path) -> None:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "mod.py").write_text("def hello():\n    return 'hi'\n")
    (workspace / "README.md").write_text("say hello\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("hello from git internals")
    top = ok(bench, "list_files")
    assert top.splitlines() == [".git/", "README.md  (10 bytes)", "src/"]
    assert ok(bench, "list_files", pattern="*.py").splitlines() == [
        "src/pkg/mod.py  (29 bytes)"]
    found = ok(bench, "search_files", regex=r"hel+o")
    assert found.splitlines() == ["README.md:1: say hello", "src/pkg/mod.py:1: def hello():"]
    assert ok(bench, "search_files", regex="hello", glob="*.md") == "README.md:1: say hello"
    assert "bad regex" in refused(bench, "search_files", regex="(")
    assert "no matches" in ok(bench, "search_files", regex="absent")


def test_the_hidden_board_folder_is_refused_and_never_listed(bench: Workbench,
                                                             workspace: Path) -> None:
    board = workspace / ".kanban"
    (board / "logs").mkdir(parents=True)
    (board / "config.toml").write_text('[profiles.p]\nmodel = "m"\n')
    (board / "logs" / "worker.log").write_text("board secret\n")
    (workspace / "notes.txt").write_text("no secret here\n")
    bench.hidden = (board,)
    assert "board's folder" in refused(bench, "read_file", path=".kanban/config.toml")
    assert "board's folder" in refused(bench, "edit_file", path=".kanban/config.toml",
                                       old='model = "m"', new='model = "m"\nsandbox = "off"')
    assert "board's folder" in refused(bench, "write_file", path=".kanban/new.toml",
                                       content="x")
    assert "board's folder" in refused(bench, "list_files", path=".kanban")
    assert ok(bench, "list_files").splitlines() == ["notes.txt  (15 bytes)"]
    assert ok(bench, "list_files", pattern="*.log") == ".: nothing matches '*.log'"
    assert ok(bench, "search_files", regex="secret") == "notes.txt:1: no secret here"
    assert (board / "config.toml").read_text() == '[profiles.p]\nmodel = "m"\n'
    assert sorted(p.name for p in board.iterdir()) == ["config.toml", "logs"]


def test_git_internals_are_not_written_but_can_be_read(bench: Workbench,
                                                       workspace: Path) -> None:
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    assert "do not write inside .git" in refused(bench, "write_file",
                                                 path=".git/hooks/pre-commit",
                                                 content="#!/bin/sh\ncurl evil\n")
    assert "do not write inside .git" in refused(bench, "edit_file", path=".git/config",
                                                 old="[core]", new="[core]\nfsmonitor=x")
    assert "do not write inside .git" in refused(bench, "write_file", path="sub/.git",
                                                 content="gitdir: /tmp/evil\n")
    assert "[core]" in ok(bench, "read_file", path=".git/config")
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / "sub" / ".git").exists()


def test_a_hard_link_to_an_outside_file_is_neither_read_nor_written_through(
        bench: Workbench, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.link(outside, workspace / "linked.txt")
    assert "hard links" in refused(bench, "read_file", path="linked.txt")
    assert "hard links" in refused(bench, "edit_file", path="linked.txt", old="secret",
                                   new="changed")
    assert ok(bench, "search_files", regex="secret") == "no matches for 'secret'"
    ok(bench, "write_file", path="linked.txt", content="mine")
    assert outside.read_text() == "secret"
    assert (workspace / "linked.txt").read_text() == "mine"


def test_saved_outputs_do_not_follow_a_planted_symlink(bench: Workbench, workspace: Path,
                                                       tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / ".kanban-outputs").symlink_to(outside)
    (workspace / "many.txt").write_text("\n".join(f"row {n}" for n in range(300)))
    shown = ok(bench, "read_file", path="many.txt")
    assert "row 0" in shown and "row 299" in shown and "whole output is in nowhere" in shown
    assert not any(outside.iterdir())
