"""Attacks through notifications: a model's text reaches a person's command, file and
webhook. It arrives as data (stdin, environment, JSON), cleaned of terminal controls and
bounded, never as part of a command line; webhook targets are http(s) URLs only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.security.conftest import Attack
from tests.support.procs import kanban, query

SHELL = ("$(touch PWNED_SUBST) `touch PWNED_TICKS`; touch PWNED_SEMI && touch PWNED_AND "
         "' \" \\ | touch PWNED_PIPE\n## fake heading\n")
CONTROLS = "\x1b]0;owned title\x07\x1b[2J\u202eevil"


def test_a_block_reason_full_of_shell_reaches_the_command_as_data_only(
        attack: Attack, tmp_path: Path) -> None:
    attack.configure('toolsets = ["kanban"]')
    got = tmp_path / "got.json"
    seen_env = tmp_path / "env.txt"
    kanban(attack.board.path, "notify", "add", "--on", "blocked,done", "--deliver",
           f"cmd:sh -c 'cat > {got}; printf %s \"$KANBAN_STATUS\" > {seen_env}'")
    kanban(attack.board.path, "notify", "add", "--on", "blocked,done", "--deliver",
           f"file:{tmp_path / 'notes.md'}")
    card, seen = attack.run([("kanban_complete", {"summary": SHELL + CONTROLS}),
                             ("kanban_complete", {"summary": SHELL * 80})],
                         title="harmless $(touch PWNED_TITLE)")
    assert attack.card(card)[0] == "done", seen
    assert query(attack.board.path, "SELECT event FROM notify_outbox") != []
    delivered = kanban(attack.board.path, "notify", "deliver", "--json")
    assert {d["status"] for d in json.loads(delivered.stdout)} == {"delivered"}
    for root in (attack.board.home, tmp_path, Path.cwd()):
        assert not list(root.rglob("PWNED*")), "a model's text was run as a command"
    payload = json.loads(got.read_text())
    assert payload["card_id"] == card and payload["title"] == "harmless $(touch PWNED_TITLE)"
    text = payload["text"]
    assert seen == ["Error: summary contains control characters"]  # refused as it came in
    assert "$(touch PWNED_SUBST)" in text and "\x1b" not in text and "\u202e" not in text
    assert len(text) <= 4000 and "characters cut" in text  # bounded, and says so
    assert seen_env.read_text() in ("blocked", "done")
    notes = (tmp_path / "notes.md").read_text()
    assert "\x1b" not in notes and "\x07" not in notes
    attack.assert_contained(tmp_path)


def test_a_webhook_target_must_be_an_http_url(attack: Attack) -> None:
    for target in ("webhook:file:///etc/passwd", "webhook:gopher://127.0.0.1:25/",
                   "webhook:http:///no-host"):
        refused = kanban(attack.board.path, "notify", "add", "--on", "done", "--deliver",
                         target, check=False)
        assert refused.returncode != 0 and "webhook needs an http" in refused.stderr
    assert query(attack.board.path, "SELECT count(*) FROM notify_subscription") == [(0,)]


def test_a_delivery_error_reaches_the_terminal_with_its_controls_spelled_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    from kanban.delivery.courier import _to_stderr

    _to_stderr("target said \x1b]0;pwned\x07\x1b[2J\nfake: all delivered")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err
    assert err.count("\n") == 1  # one line: no forged line after it
    assert "\\x1b]0;pwned\\x07" in err
