"""`delegate` items name skills (checked against the catalog) and may carry a key."""

from __future__ import annotations

import json
from pathlib import Path

from kanban import control
from kanban.children import ChildStatus, ChildTask, add_children
from kanban.service import Kanban
from kanban.skills import load_catalog
from kanban.state.config import Config
from kanban.tools.delegate import LeadScope, delegate
from kanban.tools.scope import WorkerScope
from kanban.worker.lead import start_lead


def write_skill(root: Path, name: str, description: str, body: str = "Do it well.") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n"
                                     f"{body}\n")
    return folder


def lead_scope(kb: Kanban, skills_home: Path) -> LeadScope:
    claim = start_lead(kb, goal="ship it", context="", board="default", model="scripted:x",
                       lease_s=30)
    with kb.db.write() as conn:  # a live dispatcher: the lead keeps waiting for children
        control.register_dispatcher(conn, host="here", pid=1, now=kb.clock())
    card = WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id)

    def finish(statuses: list[ChildStatus]) -> None:  # plays the workers
        for s in statuses:
            if s.status == "ready":
                kb.complete(s.id, f"did {s.title}")

    return LeadScope(card, Config(), None, on_progress=finish, poll_s=0.01,
                     skills=load_catalog(skills_home, packages=False))


def test_children_get_their_skills_and_keys_reuse_cards(kb: Kanban, tmp_path: Path) -> None:
    write_skill(tmp_path / "skills", "tone", "House tone of voice")
    lead = lead_scope(kb, tmp_path)
    result = delegate({"tasks": [{"title": "draft", "goal": "g", "skills": ["tone"],
                                  "key": "draft-1"}]}, lead)
    (child,) = json.loads(result.content)["children"]
    card = kb.card(child["id"])
    assert card.skill_names == ("tone",) and card.key == "draft-1"
    # A second call with a key an unfinished card holds reuses that card.
    kb.retry(card.id)
    lead.on_progress = lambda statuses: None
    with kb.db.write() as conn:
        again = add_children(conn, lead.card.card_id, [ChildTask("draft", key="draft-1")],
                             model=None, timeout_s=None, max_attempts=1, max_depth=2,
                             now=kb.clock())
    assert again == [card.id]


def test_unknown_skills_are_refused_before_any_card(kb: Kanban, tmp_path: Path) -> None:
    lead = lead_scope(kb, tmp_path)
    before = len(kb.list_cards())
    result = delegate({"tasks": [{"title": "draft", "goal": "g", "skills": ["nope"]}]}, lead)
    assert result.is_error and "unknown skill(s): nope" in result.content
    assert len(kb.list_cards()) == before
