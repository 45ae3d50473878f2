"""Stored text cannot drive the terminal: `log`, `show`, `list` and `board` spell controls
out; input with C1 controls or bidi overrides is refused; and the smaller hostile inputs
(a closed pipe, a non-ASCII digit, a deep --db path) each end cleanly."""

from __future__ import annotations

import os
import pty
import re
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import KANBAN, kanban

NASTY = "t\x1b]0;pwned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \x9b31m \u202etxt.exe \r\x07 \x85"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _store_nasty_text(board: BoardFiles) -> int:
    """A card whose transcript and stored fields carry escapes (an older version's data,
    or a model's own text) — written past the input filter, straight into the file."""
    spec = board.script("nasty", [{"text": NASTY}, {"text": NASTY}])
    board.configure(f'[profiles.nasty]\nmodel = "{spec}"\n')
    card = board.add("clean title", profile="nasty")
    kanban(board.path, "dispatch", "--once")
    with sqlite3.connect(board.path) as conn:
        conn.execute("UPDATE card SET title = ?, goal = ?, result = ?, error = ? WHERE id = ?",
                     (NASTY, NASTY, NASTY, NASTY, card))
        conn.execute("INSERT INTO comment (card_id, author, body, at) VALUES "
                     "(?, 'user', ?, '2026-01-01 00:00:00')", (card, NASTY))
    return card


def test_no_raw_control_reaches_the_terminal(board: BoardFiles) -> None:
    card = _store_nasty_text(board)
    for command in (("log", str(card)), ("show", str(card)), ("list",), ("board",),
                    ("show", str(card), "--json"), ("list", "--json"), ("board", "--json"),
                    ("log", str(card), "--json")):
        out = kanban(board.path, *command).stdout
        assert not RAW_CONTROL.search(out), (command, RAW_CONTROL.findall(out))
    shown = kanban(board.path, "show", str(card)).stdout
    assert "\\x1b]0;pwned" in shown and "\\u202e" in shown  # spelled out, not hidden


@pytest.mark.parametrize("bad", ["a\x9bb", "x\u202eexe.txt", "bell\x07"])
def test_the_input_filter_refuses_c1_and_bidi_controls(board: BoardFiles, bad: str) -> None:
    refused = kanban(board.path, "add", bad, check=False)
    assert refused.returncode == 1 and "control characters" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_a_non_ascii_digit_is_not_a_card_id(board: BoardFiles) -> None:
    board.add("one")
    refused = kanban(board.path, "show", "\u0661", check=False)
    assert refused.returncode == 2 and "is not a card id" in refused.stderr


def test_init_makes_every_missing_folder_private(tmp_path: Path) -> None:
    subprocess.run([*KANBAN, "init", "--db", "new/sub/k.db"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=60)
    for folder in (tmp_path / "new", tmp_path / "new" / "sub"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_a_closed_pipe_is_a_quiet_exit(board: BoardFiles) -> None:
    for n in range(400):
        board.add(f"card {n} with a title long enough to fill a pipe's buffer quickly")
    for command in (("board",), ("list", "--all"), ("list", "--all", "--json")):
        with subprocess.Popen([*KANBAN, "--db", str(board.path), *command],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.read(10)
            proc.stdout.close()  # the reader went away, as `| head -1` does
            err = proc.stderr.read().decode()
            proc.wait(timeout=60)
        assert err == "" and proc.returncode in (0, 141), (command, proc.returncode, err)


HIDDEN = "visible \x1b[8mhidden from view\x1b[0m and \x1b[31mred\x1b[0m"


def test_a_models_colour_codes_are_spelled_out_not_obeyed(board: BoardFiles) -> None:
    spec = board.script("painter", [{"text": HIDDEN}])
    board.configure(f'[profiles.painter]\nmodel = "{spec}"\n')
    card = board.add("paint the terminal", profile="painter")
    kanban(board.path, "dispatch", "--once")
    with sqlite3.connect(board.path) as conn:  # the title too, as an older version stored it
        conn.execute("UPDATE card SET title = ? WHERE id = ?", (HIDDEN, card))
    for command in (("log", str(card)), ("show", str(card)), ("board",), ("list",)):
        out = kanban(board.path, *command, env={**os.environ, "COLUMNS": "300"}).stdout
        assert "\x1b" not in out, (command, out)
        assert "\\x1b[8mhidden" in out and "\\x1b[31mred" in out, (command, out)


def on_a_terminal(board: BoardFiles, *args: str) -> bytes:
    """What `kanban ARGS` writes to a colour terminal (a pseudo-terminal, TERM=xterm)."""
    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "300"}
    env.pop("NO_COLOR", None)
    with subprocess.Popen([*KANBAN, "--db", str(board.path), *args], stdout=child,
                          stderr=child, stdin=subprocess.DEVNULL, env=env) as proc:
        os.close(child)
        out = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=60)
    os.close(main)
    return out


def test_on_a_colour_terminal_only_the_clis_own_colours_pass(board: BoardFiles) -> None:
    spec = board.script("painter", [{"text": HIDDEN}])
    board.configure(f'[profiles.painter]\nmodel = "{spec}"\n')
    card = board.add("paint the terminal", profile="painter")
    kanban(board.path, "dispatch", "--once")
    with sqlite3.connect(board.path) as conn:
        conn.execute("UPDATE card SET title = ? WHERE id = ?", (HIDDEN, card))
    for command in (("log", str(card)), ("show", str(card)), ("board",), ("list",)):
        out = on_a_terminal(board, *command)
        assert re.search(rb"\x1b\[[0-9;]+m", out), (command, out)  # colour was on
        assert b"\x1b[8m" not in out and b"\x1b[31m" not in out, (command, out)
        assert b"\\x1b[8mhidden" in out, (command, out)
