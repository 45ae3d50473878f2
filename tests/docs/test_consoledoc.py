"""The docs' example runner: what it reads from a page, what it forgives, what it catches."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.consoledoc import (
    Block,
    blocks,
    matches,
    normalise,
    rows_not_in,
    run_page,
    script,
    update,
    update_rows,
)

PAGE = '''# A page

<!-- test: setup
kanban init
-->
```console
$ kanban add "Write the parser" \\
    --priority 5
#1
$ kanban list
#1  ready        5    0s  Write the parser
```

Some prose.

<!-- test: skip needs a systemd user session -->
```console
$ systemctl --user daemon-reload
```

<!-- test: unordered -->
```console
$ printf 'b\\na\\n'
a
b
```
'''


def page(tmp_path: Path, text: str = PAGE) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_blocks_commands_outputs_and_markers(tmp_path: Path) -> None:
    first, skipped, unordered = blocks(page(tmp_path), "page.md")
    assert [c.text for c in first.commands] == [
        'kanban add "Write the parser"  --priority 5', "kanban list"]
    assert first.commands[0].expected == "#1\n" and first.setup == "kanban init"
    assert first.line == 6 and first.id == "page.md:6"
    assert skipped.skip == "needs a systemd user session"
    assert skipped.id == "page.md:17-skip(needs a systemd user session)"
    assert unordered.unordered and not first.unordered and not unordered.setup


@pytest.mark.parametrize("bad, why", [
    ("```console\n#1\n```\n", "output before any"),
    ("```console\n```\n", r"without a `\$ ` command"),
    ("```console\n$ true\n", "never ends"),
    ("<!-- test: sometimes -->\n```console\n$ true\n```\n", "unknown marker"),
])
def test_a_malformed_block_is_refused(tmp_path: Path, bad: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        blocks(page(tmp_path, bad), "page.md")


def test_volatile_parts_are_forgiven_on_both_sides() -> None:
    page_says = ("2026-11-23 11:12:47.574 +00:00 #1 done (completed) after 0.03s: pid 10325 "
                 "exit 0, tokens 2,720 in / 54 out\n#2  ready   0s  Test")
    printed = ("2027-01-02 03:04:05.678 +00:00 #1 done (completed) after 1.2s: pid 99 "
               "exit 0, tokens 3,424 in / 60 out\n#2 ready 12s Test")
    assert normalise(page_says) == normalise(printed)
    assert matches("on branch kanban/1 at 395e53f", "on branch kanban/1 at 0c1d2e3")
    assert matches("on branch kanban/1 at 395e53f", "on branch kanban/1 at 8634809")
    assert matches(page_says, printed)


@pytest.mark.parametrize("printed", [
    "#1 failed (completed) after 0.03s",  # a word changed
    "#1 done (completed) after 0.03s\nan extra line",
    "",  # nothing printed
])
def test_a_changed_output_does_not_match(printed: str) -> None:
    assert not matches("#1 done (completed) after 0.03s", printed)


def test_an_ellipsis_line_stands_for_any_lines() -> None:
    assert matches("head\n…\ntail", "head\na\nb\ntail")
    assert matches("head\n…\ntail", "head\ntail")
    assert not matches("head\n…\ntail", "head\na\nb")
    assert matches("b\na", "a\nb", unordered=True) and not matches("b\na", "a\nb")


def test_a_page_runs_and_update_rewrites_only_what_changed(tmp_path: Path) -> None:
    text = PAGE.replace("#1  ready        5    0s  Write the parser", "#1  done  Write it")
    path = page(tmp_path, text)
    page_blocks = blocks(path, "page.md")
    outcome = run_page(page_blocks, tmp_path / "run")
    assert outcome.outputs[7] == "#1\n" and not outcome.setup_failures
    assert 17 not in outcome.outputs  # the skipped block never ran
    listed = page_blocks[0].commands[1]
    assert listed.line == 10
    assert not matches(listed.expected, outcome.outputs[listed.line])
    assert update(path, outcome, page_blocks) == 1
    # the real output is back, the rest untouched; its age is what the run printed (0s on
    # a quiet machine, a few seconds on a loaded one)
    assert normalise(path.read_text()) == normalise(PAGE)


RESULTS = """# results

| #   | metric      | kanban | ratio |
|-----|-------------|--------|-------|
| 1.1 | claims/s    | 390 /s | 0.62x |
| 1.3 | claims/s, 8 | 794 /s | 1.26x |
"""


def rows_page(tmp_path: Path, shown_rows: str) -> list[Block]:
    (tmp_path / "results.md").write_text(RESULTS)
    text = ("<!-- test: rows results.md -->\n```console\n$ python -m bench\n"
            f"{shown_rows}```\n")
    return blocks(page(tmp_path, text), "page.md")


def test_shown_rows_must_be_recorded_cell_for_cell(tmp_path: Path) -> None:
    # Padding and trimmed rows are the page's business; every cell is not.
    [block] = rows_page(tmp_path, "| # | metric | kanban | ratio |\n|---|---|---|---|\n…\n"
                                  "| 1.3 |  claims/s, 8 | 794 /s | 1.26x |\n")
    assert block.rows_of == "results.md" and not block.runs
    assert rows_not_in(block, tmp_path) == []
    [typed] = rows_page(tmp_path, "| 1.1 | claims/s | 391 /s | 0.62x |\n")
    [missing] = rows_not_in(typed, tmp_path)
    assert "391 /s" in missing and "has: 1.1 | claims/s | 390 /s | 0.62x" in missing
    [gone] = rows_page(tmp_path, "| 9.9 | old | 1 /s | 1x |\n")
    assert "no such row" in rows_not_in(gone, tmp_path)[0]
    [empty] = rows_page(tmp_path, "nothing measured\n")
    assert rows_not_in(empty, tmp_path) == ["the block shows no table rows"]


def test_a_rows_block_is_not_run(tmp_path: Path) -> None:
    [block] = rows_page(tmp_path, "| 1.1 | claims/s | 390 /s | 0.62x |\n")
    assert "python -m bench" not in script([block], tmp_path)


def test_update_rewrites_shown_rows_from_the_recorded_ones(tmp_path: Path) -> None:
    [block] = rows_page(tmp_path, "| 1.1 | claims/s | 391 /s | 0.61x |\n| 9.9 | old | 1 | 1x |\n")
    assert update_rows(tmp_path / "page.md", [block], tmp_path) == 1
    [again] = blocks(tmp_path / "page.md", "page.md")
    shown_now = "\n".join(c.expected for c in again.commands)
    assert "| 1.1 | claims/s    | 390 /s | 0.62x |" in shown_now
    assert "| 9.9 | old | 1 | 1x |" in shown_now  # FILE lacks it: left for the test to name
    assert rows_not_in(again, tmp_path) == [
        "9.9 | old | 1 | 1x\n  results.md has: no such row"]
