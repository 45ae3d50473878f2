"""`make demo` runs start to end on a fresh .kanban-demo/ database: a lead, three workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban import demo


def test_demo_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    stale = Path.cwd() / ".kanban-demo" / "kanban.db"
    stale.parent.mkdir()
    stale.write_text("left over from an earlier run")  # the demo starts afresh
    demo.main()
    out = capsys.readouterr().out
    assert "$ kanban init\nkanban database created at" in out
    assert "The lead's answer\nAnswer for: Write a one-page guide" in out
    assert "board default · 4 cards · no dispatcher" in out
    assert "todo 0           ready 0         running 0       blocked 0       done 4" in out
    for child in ("#2 done Research:", "#3 done Outline:", "#4 done Draft:"):
        assert child in out  # the lead's tree in `kanban show 1`
