"""`make demo` runs start to end on a fresh .kanban-demo/ database: a lead, three workers;
the commands it suggests at the end work as printed."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from kanban.cli.app import app


def test_demo_walkthrough() -> None:
    stale = Path.cwd() / ".kanban-demo" / "kanban.db"
    stale.parent.mkdir()
    stale.write_text("left over from an earlier run")  # the demo starts afresh
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    done = subprocess.run([sys.executable, "-P", "-m", "kanban.cli.demo"], env=env,
                          capture_output=True, text=True, timeout=300)  # as `make demo` runs
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "$ kanban init\nkanban database created at" in out
    assert "The lead's answer\nAnswer for: Write a one-page guide" in out
    assert_plain(out)
    assert "board default · 4 cards · no dispatcher" in out
    assert "done 4\n" in out
    for child in ("#2 done Research:", "#3 done Outline:", "#4 done Draft:"):
        assert child in out  # the lead's tree in `kanban show 1`
    folder = Path.cwd() / ".kanban-demo" / "workspaces" / "default" / "1"
    assert f"$ kanban workspace 2  (the children share the lead's folder)\n{folder}\n" in out
    assert "The workers wrote: draft.md, outline.md, research.md" in out
    assert "Wrote draft.md" in out
    draft = (folder / "draft.md").read_text()
    assert draft.startswith("# Draft: Write a one-page guide") and "## From #2 Research" in draft
    suggested = [line.strip() for line in out.split("\nNext: ", 1)[1].splitlines()
                 if line.startswith("  .venv/bin/kanban ")]
    assert len(suggested) >= 5
    runner = CliRunner()
    for line in suggested:
        args = shlex.split(line)[1:]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (line, result.stderr)
        assert result.stdout.strip(), line


def assert_plain(out: str) -> None:
    """Piped, the demo prints as every command does: whole lines, no terminal board, no
    escapes (it once wrapped at Rich's default 80 columns)."""
    assert ('$ kanban run "Write a one-page guide to SQLite\'s write-ahead log"  '
            "(lead model: scripted:lead-demo)\n") in out
    assert "\n- #2 Research: Write a one-page guide to SQLite's write-ahead log: Wrote " \
        "research.md" in out
    assert max(len(line) for line in out.splitlines()) > 80
    assert "\x1b" not in out and "─" * 20 not in out  # the live board draws only on a terminal
