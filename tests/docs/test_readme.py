"""README.md is a front page: the two fresh-machine commands first, short, and every link
it gives leads to a file of the repository (the docs site holds the manual)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_it_starts_with_make_demo_and_make_test() -> None:
    head = README.splitlines()[:8]
    demo = next(i for i, line in enumerate(head) if line.startswith("make demo"))
    test = next(i for i, line in enumerate(head) if line.startswith("make test"))
    assert demo < test
    assert all(line == "" or line.startswith(("# ", "```")) for line in head[:demo])


def test_it_stays_a_front_page() -> None:
    assert len(README.splitlines()) <= 250


def test_its_links_lead_to_files() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "README links to the docs"
    assert [t for t in local if not (REPO / t).exists()] == []
