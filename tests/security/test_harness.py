"""The harness itself: a replayed attack reaches the worker, and a leak is caught."""

from __future__ import annotations

from pathlib import Path

from tests.security.conftest import Attack, canary_leaks


def test_a_replayed_call_runs_and_the_canary_scan_finds_a_planted_leak(
        attack: Attack, tmp_path: Path) -> None:
    attack.configure('toolsets = ["kanban", "file"]\napproval = "allow"')
    card, seen = attack.run([("write_file", {"path": "note.txt", "content": "hello"})])
    assert attack.card(card)[0] == "done"
    assert (attack.workspace(card) / "note.txt").read_text() == "hello"
    attack.assert_contained()
    leak = tmp_path / "leak.txt"
    leak.write_text(f"stolen: {attack.canaries.openai_key}")
    assert canary_leaks(attack.canaries.values, [leak]) == [str(leak)]
