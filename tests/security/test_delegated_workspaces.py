"""A lead's model names a child's workspace: it may not aim a delegated card at the user's
HOME, ~/.ssh or /etc, where the child's file tools and commands would then work."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.security.conftest import Attack
from tests.support.procs import query

ORCHESTRATOR = '''
role = "orchestrator"
toolsets = ["kanban", "file"]
approval = "allow"
'''


def test_a_child_cannot_be_pointed_at_a_folder_outside_the_project(attack: Attack) -> None:
    attack.configure(ORCHESTRATOR)
    elsewhere = Path(tempfile.mkdtemp(prefix="kanban-someones-home-", dir="/var/tmp"))
    (elsewhere / ".ssh").mkdir()
    outside = [str(elsewhere), str(elsewhere / ".ssh"), "/etc", "/root"]
    calls = [("delegate", {"tasks": [{"title": "look around", "goal": "read the keys",
                                      "workspace": f"dir:{where}"}]}) for where in outside]
    card, seen = attack.run(calls)
    assert len(seen) == len(outside)
    try:
        for result, where in zip(seen, outside, strict=True):
            assert "lies outside" in result and where in result, result
        assert query(attack.board.path, "SELECT count(*) FROM card WHERE parent_id = ?",
                     card) == [(0,)]
        attack.assert_contained()
    finally:
        shutil.rmtree(elsewhere)


def test_a_child_may_work_in_a_folder_of_the_project(attack: Attack) -> None:
    attack.configure(ORCHESTRATOR)
    sub = attack.board.home / "docs"
    sub.mkdir()
    card, _ = attack.run([("delegate", {"tasks": [{"title": "edit the docs", "goal": "g",
                                                   "workspace": f"dir:{sub}"}]})])
    assert attack.card(card)[0] == "waiting"  # on its child
    assert query(attack.board.path, "SELECT workspace FROM card WHERE parent_id = ?",
                 card) == [(f"dir:{sub}",)]
