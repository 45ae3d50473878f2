"""Attachments: content-addressed, capped, never executable, placed read-only for workers."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from kanban.attachments import AttachmentNotFound, Attachments
from kanban.cards import NewCard
from kanban.errors import CardNotFound, ValidationError
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.worker.materials import ATTACHMENTS_DIR, place_materials
from tests.support.db import STORES, events_of

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def files(db: Database, home: Path, kb: Kanban) -> Attachments:
    return Attachments(db, home, max_bytes=1024, clock=kb.clock)


def write(path: Path, data: bytes, mode: int = 0o644) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


def blobs(home: Path) -> list[Path]:
    root = home / "attachments"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_attach_stores_the_bytes_once_by_content(files: Attachments, kb: Kanban, db: Database,
                                                 home: Path, tmp_path: Path) -> None:
    a, b = kb.add_card(NewCard("a")), kb.add_card(NewCard("b"))
    script = write(tmp_path / "run.sh", b"#!/bin/sh\necho hi\n", mode=0o755)
    record, created = files.add(a.id, script)
    assert created and record.name == "run.sh" and record.size == 18
    assert record.sha256 == hashlib.sha256(script.read_bytes()).hexdigest()
    assert record.media_type.endswith("x-sh")  # from the name only; never sniffed or run
    (blob,) = blobs(home)
    assert blob == files.path_of(record) and blob.read_bytes() == script.read_bytes()
    assert stat.S_IMODE(blob.stat().st_mode) == 0o600  # never executable, never shared
    other, _ = files.add(b.id, script, name="copy.unknown-kind")
    assert other.media_type == "application/octet-stream"
    assert len(blobs(home)) == 1  # one content, one file
    assert [e["kind"] for e in events_of(db, a.id)] == ["created", "attached"]
    assert [x.name for x in kb.detail(a.id).attachments] == ["run.sh"]


def test_removing_keeps_bytes_another_card_holds(files: Attachments, kb: Kanban, home: Path,
                                                 tmp_path: Path) -> None:
    a, b = kb.add_card(NewCard("a")), kb.add_card(NewCard("b"))
    source = write(tmp_path / "data.csv", b"x,y\n1,2\n")
    files.add(a.id, source)
    files.add(b.id, source)
    files.remove(a.id, "data.csv")
    assert len(blobs(home)) == 1 and files.list(a.id) == []
    files.remove(b.id, "data.csv")
    assert blobs(home) == []
    with pytest.raises(AttachmentNotFound):
        files.remove(b.id, "data.csv")


def test_same_name_same_bytes_is_a_no_op_and_different_bytes_are_refused(
        files: Attachments, kb: Kanban, tmp_path: Path) -> None:
    card = kb.add_card(NewCard("a"))
    first, _ = files.add(card.id, write(tmp_path / "n.txt", b"one"))
    again, created = files.add(card.id, tmp_path / "n.txt")
    assert not created and again == first
    with pytest.raises(ValidationError, match="already has a different 'n.txt'"):
        files.add(card.id, write(tmp_path / "n.txt", b"two"))
    assert [r.sha256 for r in files.list(card.id)] == [first.sha256]


def test_what_is_refused_leaves_nothing_behind(files: Attachments, kb: Kanban, home: Path,
                                               tmp_path: Path) -> None:
    card = kb.add_card(NewCard("a"))
    big = write(tmp_path / "big.bin", b"x" * 1025)
    with pytest.raises(ValidationError, match="larger than the attachment limit"):
        files.add(card.id, big)
    with pytest.raises(ValidationError, match="not a regular file"):
        files.add(card.id, tmp_path)
    with pytest.raises(ValidationError, match="cannot read"):
        files.add(card.id, tmp_path / "missing")
    for bad in ("", "..", "a/b", "tab\there"):
        with pytest.raises(ValidationError):
            files.add(card.id, write(tmp_path / "ok.txt", b"ok"), name=bad)
    with pytest.raises(CardNotFound):
        files.add(999, tmp_path / "ok.txt")
    assert files.list(card.id) == []
    leftovers = list((home / "attachments").rglob("*")) if (home / "attachments").exists() else []
    assert [p for p in leftovers if p.is_file()] == []


def test_a_worker_gets_read_only_copies_in_its_workspace(files: Attachments, kb: Kanban,
                                                         tmp_path: Path) -> None:
    card = kb.add_card(NewCard("a"))
    files.add(card.id, write(tmp_path / "spec.md", b"# spec\n"))
    files.add(card.id, write(tmp_path / "tool.sh", b"rm -rf /\n", mode=0o755))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # What a previous attempt might have left: a stale copy and a planted symlink.
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / ".kanban-card").mkdir()
    os.symlink(outside, workspace / ATTACHMENTS_DIR)
    materials = place_materials(files, card.id, [], workspace)
    assert [path for _, path in materials.attachments] == [
        f"{ATTACHMENTS_DIR}/spec.md", f"{ATTACHMENTS_DIR}/tool.sh"]
    folder = workspace / ATTACHMENTS_DIR
    assert not folder.is_symlink() and list(outside.iterdir()) == []
    assert (folder / "spec.md").read_bytes() == b"# spec\n"
    for copy in folder.iterdir():
        assert stat.S_IMODE(copy.stat().st_mode) == 0o444
    files.remove(card.id, "tool.sh")
    place_materials(files, card.id, [], workspace)  # the next attempt
    assert sorted(p.name for p in folder.iterdir()) == ["spec.md"]
