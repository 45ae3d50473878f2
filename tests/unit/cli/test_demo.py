"""`make demo` runs start to end on a fresh .kanban-demo/ database."""

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
    assert "board default · 4 cards · no dispatcher" in out
    assert "#1 done Write the CSV parser" in out
