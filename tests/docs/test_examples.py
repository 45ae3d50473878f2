"""Every console example in README.md and docs/ runs, and prints what the page says.

Each page's examples run in order in one shell, in a fresh project folder under a
throwaway home, with the real `kanban` console script and the offline scripted model, so
state carries from block to block. Runs are shared by a page's tests (one per block, so a
failure names its line, and a skipped block shows its reason in its id).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.docs.consoledoc import (
    Block,
    Outcome,
    PageRun,
    blocks,
    matches,
    normalise,
    rows_not_in,
    shown,
    start_page,
)
from tests.support.db import fresh_postgres_database
from tests.support.llm_bodies import called_tools
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _page_blocks() -> dict[str, list[Block]]:
    found = {}
    for path in PAGES:
        page = str(path.relative_to(REPO))
        found[page] = blocks(path, page)
    return found


BLOCKS = _page_blocks()


def _answer(body: dict[str, Any]) -> Reply:
    """A model that completes its card at once, naming itself: enough to show a profile
    reaching its server."""
    if "kanban_complete" in called_tools(body):
        return text_reply("done")
    return tool_reply(("kanban_complete", {"summary": f"{body.get('model')} answered"}))


@pytest.fixture(scope="session")
def docs_llm() -> Iterator[str]:
    """A fake OpenAI-compatible server standing in for a page's Ollama or vLLM."""
    with LLMServer(responder=_answer) as server:
        yield server.url.removeprefix("http://")


@pytest.fixture(scope="session")
def docs_pg_urls() -> Iterator[Callable[[], str]]:
    """Fresh PostgreSQL databases, one per page that needs one (skip_or_fail without a
    server); all dropped at the end of the session."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(fresh_postgres_database())


class Pages:
    """Each page's run, shared by its blocks' tests. The first test to ask starts every
    selected page at once (they mostly wait on workers, so side by side they take about
    as long as the slowest); a page needing PostgreSQL starts when asked, so that only its
    own tests skip without a server."""

    def __init__(self, request: pytest.FixtureRequest, root: Path) -> None:
        self.request, self.root = request, root
        self.started: dict[str, PageRun] = {}
        self.outcomes: dict[str, Outcome] = {}

    def outcome(self, page: str) -> Outcome:
        if not self.started:
            selected = {item.callspec.params["block"].page for item in self.request.session.items
                        if hasattr(item, "callspec") and "block" in item.callspec.params}
            for name in sorted(selected - {page}):
                if not self._needs(name, "postgres"):
                    self._start(name)
        if page not in self.started:
            self._start(page)
        if page not in self.outcomes:
            self.outcomes[page] = self.started[page].outcome()
        return self.outcomes[page]

    def _needs(self, page: str, what: str) -> bool:
        return any(b.needs == what for b in BLOCKS[page])

    def _start(self, page: str) -> None:
        pg_url = self.request.getfixturevalue("docs_pg_urls")() \
            if self._needs(page, "postgres") else None
        llm = self.request.getfixturevalue("docs_llm") if self._needs(page, "llm") else None
        folder = self.root / f"page{list(BLOCKS).index(page)}"  # no page name in paths
        self.started[page] = start_page(BLOCKS[page], folder,
                                        pg_url=pg_url, llm_address=llm)


@pytest.fixture(scope="session")
def pages(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Pages]:
    found = Pages(request, tmp_path_factory.mktemp("docs"))
    yield found
    for run in found.started.values():
        if run.process.poll() is None:
            run.process.kill()
        run.process.communicate()  # reaps it and closes its pipe


# A block marked `test: skip REASON` is one no test can run (a systemd session, a real
# model server): it is a skip by design, named in the test id, and CI=true does not turn
# it into a failure as it does for a missing service (PostgreSQL here, via skip_or_fail).
@pytest.mark.parametrize("block", [
    pytest.param(b, id=b.id, marks=[pytest.mark.skip(reason=b.skip)] if b.skip else [])
    for page in BLOCKS.values() for b in page if b.rows_of is None])
def test_console_example(block: Block, pages: Pages) -> None:
    outcome = pages.outcome(block.page)
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


# A block marked `test: rows FILE` shows a command too slow to run here (a benchmark): what
# it shows must be rows FILE holds, so the page cannot keep numbers of a run long gone.
@pytest.mark.parametrize("rows_block", [
    pytest.param(b, id=b.id) for page in BLOCKS.values() for b in page if b.rows_of])
def test_shown_rows_are_the_recorded_ones(rows_block: Block) -> None:
    missing = rows_not_in(rows_block, REPO)
    assert not missing, (f"{rows_block.page}:{rows_block.line} shows rows "
                         f"{rows_block.rows_of} does not hold:\n" + "\n".join(missing))
