"""The race-free resolver under the file tools: walks inside, refuses what leads out or into
a hidden folder, and keeps using what it opened when the path changes underneath."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban.state import beneath
from kanban.state.beneath import GitInternals, NotAFile, OutsideWorkspace, ReadOnlyPlace, Wall
from kanban.tools.confine import entries, read_bytes, write_text
from tests.support.pg import skip_or_fail


@pytest.fixture(params=["openat2", "openat"])
def kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test twice: with openat2 (where the kernel has it) and with the openat walk."""
    if request.param == "openat":
        monkeypatch.setattr(beneath, "_OPENAT2", [None])
    elif beneath._openat2() is None:
        skip_or_fail("no openat2 here (Linux 5.6 and later have it)")
    yield request.param


@pytest.fixture
def ws(tmp_path: Path, kernel: str) -> Path:
    (tmp_path / "ws" / "src").mkdir(parents=True)
    (tmp_path / "ws" / "src" / "a.txt").write_text("inside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    return tmp_path / "ws"


def shown(wall: Wall, name: str, **kwargs: bool) -> str:
    with wall.resolve(name, **kwargs) as found:
        return found.shown


def test_plain_paths_dots_and_inside_symlinks_resolve_to_where_they_lead(ws: Path) -> None:
    (ws / "rel").symlink_to("src")
    (ws / "abs").symlink_to(ws / "src" / "a.txt")
    (ws / "src" / "up").symlink_to("../src/./a.txt")
    wall = Wall(ws)
    assert shown(wall, "src/a.txt") == "src/a.txt"
    assert shown(wall, "./src/../src//a.txt") == "src/a.txt"
    assert shown(wall, "rel/a.txt") == "src/a.txt"
    assert shown(wall, "abs") == "src/a.txt"
    assert shown(wall, "src/up") == "src/a.txt"
    assert shown(wall, "src/..") == "."
    assert shown(wall, "src/new.txt") == "src/new.txt"  # the last part need not exist
    with wall.resolve("src/a.txt") as found:
        assert read_bytes(found, "src/a.txt", 100) == b"inside"


@pytest.mark.parametrize("name", ["..", "src/../..", "../ws/src/a.txt", "/etc/passwd",
                                  "~/x", "out-rel/secret.txt", "out-abs", "loop/x",
                                  "src/../out-rel"])
def test_what_leads_out_is_refused(ws: Path, name: str) -> None:
    (ws / "out-rel").symlink_to("../outside")
    (ws / "out-abs").symlink_to(ws.parent / "outside" / "secret.txt")
    (ws / "loop").symlink_to("loop")
    with pytest.raises(OutsideWorkspace):
        Wall(ws).resolve(name).close()


def test_hidden_folders_are_refused_however_they_are_reached(ws: Path) -> None:
    board = ws / ".kanban"
    (board / "logs").mkdir(parents=True)
    (board / "config.toml").write_text("[profiles.x]\n")
    (ws / "door").symlink_to(".kanban")
    (ws / "abs-door").symlink_to(board / "logs")
    wall = Wall(ws, hidden=(board,))
    for name in (".kanban", ".kanban/config.toml", "door/config.toml", "abs-door",
                 "src/../.kanban/logs/new.txt", "door"):
        with pytest.raises(OutsideWorkspace, match="board's folder"):
            wall.resolve(name, make_folders=True).close()
    with wall.resolve(".") as top:
        names = [e.shown for e in entries(top, wall.hidden_ids(), recursive=True)]
    assert names == ["abs-door", "door", "src", "src/a.txt"]  # links listed, never followed


def test_writes_inside_git_are_refused_reads_are_not(ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "hooks").symlink_to(".git/hooks")
    (ws / "sub").mkdir()
    wall = Wall(ws)
    for name in (".git/config", ".git/hooks/pre-commit", "hooks/post-checkout", ".git",
                 "sub/.git", "sub/.GIT/config", ".git/info/attributes"):
        with pytest.raises(GitInternals), wall.resolve(name, make_folders=True) as found:
            write_text(found, name, "gitdir: /elsewhere\n", 100)
    assert sorted(p.name for p in (ws / ".git").iterdir()) == ["config", "hooks"]
    assert not any((ws / ".git" / "hooks").iterdir()) and not (ws / "sub" / ".git").exists()
    with wall.resolve(".git/config") as found:
        assert read_bytes(found, ".git/config", 100) == b"[core]\n"


def test_writes_into_read_only_places_are_refused_however_reached(ws: Path) -> None:
    """A venv and a start-up file the sandbox binds read-only: read, never written, also
    through a symlink or a folder the walk would make."""
    site = ws / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    (site / "ours.pth").write_text("mine\n")
    (ws / ".bashrc").write_text("# the user's\n")
    (ws / "sp").symlink_to(".venv/lib/site-packages")
    wall = Wall(ws, readonly=(ws / ".venv", ws / ".bashrc"))
    for name in (".venv/lib/site-packages/evil.pth", ".venv/lib/site-packages/ours.pth",
                 "sp/evil.pth", "sp/new/sitecustomize.py", ".venv/pyvenv.cfg", ".bashrc",
                 "src/../.venv/x.py"):
        with pytest.raises(ReadOnlyPlace), wall.resolve(name, make_folders=True) as found:
            write_text(found, name, "import os\n", 100)
    assert sorted(p.name for p in site.iterdir()) == ["ours.pth"]
    assert (ws / ".bashrc").read_text() == "# the user's\n"
    with wall.resolve("sp/ours.pth") as found:
        assert read_bytes(found, "sp/ours.pth", 100) == b"mine\n"
    with wall.resolve("src/b.txt", make_folders=True) as found:
        write_text(found, "src/b.txt", "the card's\n", 100)
    assert (ws / "src" / "b.txt").read_text() == "the card's\n"


def test_a_folder_swapped_for_a_symlink_after_the_walk_changes_nothing_outside(
        ws: Path) -> None:
    outside = ws.parent / "outside"
    with Wall(ws).resolve("src/new.txt") as found:
        os.rename(ws / "src", ws / "src-moved")
        (ws / "src").symlink_to(outside)
        write_text(found, "src/new.txt", "written", 100)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (ws / "src-moved" / "new.txt").read_text() == "written"


def test_a_missing_folder_made_by_the_walk_is_never_followed_once_swapped(ws: Path) -> None:
    outside = ws.parent / "outside"
    real_mkdir = os.mkdir

    def mkdir_then_swap(path: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(path, mode, dir_fd=dir_fd)
        os.rmdir(path, dir_fd=dir_fd)
        os.symlink(str(outside), path, dir_fd=dir_fd)  # an attacker's swap right after

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "mkdir", mkdir_then_swap)
        with pytest.raises((OutsideWorkspace, NotAFile)):
            Wall(ws).resolve("made/deeper/x.txt", make_folders=True).close()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_hard_links_are_not_read_and_writes_replace_the_name_not_the_file(ws: Path) -> None:
    secret = ws.parent / "outside" / "secret.txt"
    os.link(secret, ws / "linked.txt")
    wall = Wall(ws)
    with wall.resolve("linked.txt") as found:
        with pytest.raises(NotAFile, match="hard links"):
            read_bytes(found, "linked.txt", 100)
        write_text(found, "linked.txt", "replaced", 100)
    assert secret.read_text() == "secret" and secret.stat().st_nlink == 1
    assert (ws / "linked.txt").read_text() == "replaced"


def test_a_file_where_a_folder_is_needed_and_a_missing_folder_say_so(ws: Path) -> None:
    with pytest.raises(NotAFile, match="not a folder"):
        Wall(ws).resolve("src/a.txt/x").close()
    with pytest.raises(NotAFile, match="no such file or folder"):
        Wall(ws).resolve("nope/x").close()


def test_descriptors_are_closed(ws: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    wall = Wall(ws, hidden=(ws / "src",))
    for name in ("src/a.txt", "x/y/z.txt", ".", "src/.."):
        with contextlib.suppress(OutsideWorkspace, NotAFile):
            wall.resolve(name, make_folders=True).close()
    assert len(os.listdir("/proc/self/fd")) == before
