"""Every console example in README.md and docs/ runs, and prints what the page says.

Each page's examples run in order in one shell, in a fresh project folder under a
throwaway home, with the real `kanban` console script and the offline scripted model, so
state carries from block to block. Runs are shared by a page's tests (one per block, so a
failure names its line, and a skipped block shows its reason in its id).
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path

import pytest

from tests.docs.consoledoc import Block, Outcome, blocks, matches, normalise, run_page, shown

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _page_blocks() -> dict[str, list[Block]]:
    found = {}
    for path in PAGES:
        page = str(path.relative_to(REPO))
        found[page] = blocks(path, page)
    return found


BLOCKS = _page_blocks()


@cache
def _outcome(page: str, root: str) -> Outcome:
    return run_page(BLOCKS[page], Path(root))


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs")


@pytest.mark.parametrize("block", [
    pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=b.skip)] if b.skip else [])
    for page in BLOCKS.values() for b in page])
def test_console_example(block: Block, runs_root: Path) -> None:
    outcome = _outcome(block.page, str(runs_root / block.page.replace("/", "_")))
    assert block.line not in outcome.setup_failures, outcome.setup_failures.get(block.line)
    for command in block.commands:
        actual = outcome.outputs[command.line]
        if not matches(command.expected, actual, unordered=block.unordered):
            diff = "\n".join(difflib.unified_diff(
                normalise(command.expected).splitlines(), normalise(actual).splitlines(),
                "the page", "the command", lineterm=""))
            pytest.fail(f"{block.page}:{command.line}: $ {shown(command)}\n"
                        f"prints (normalised), against the page:\n{diff}\n"
                        f"--- as printed ---\n{actual}", pytrace=False)
