"""The spare worker rehearses a worker's first reads on no card (worker/forkserver.py): they
must keep running as the code they stand for changes (a rehearsal that raised would only
be skipped, silently costing the speed-up), and they must change nothing."""

from __future__ import annotations

from pathlib import Path

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.worker.forked import _rehearse_reads
from tests.support.db import open_sqlite


def test_the_rehearsal_runs_and_changes_nothing(tmp_path: Path) -> None:
    db = open_sqlite(tmp_path / "kanban.db")
    try:
        kb = Kanban(db)
        kb.add_card(NewCard("a card that is not card 0"))
        with db.read() as conn:
            before = conn.all("SELECT (SELECT count(*) FROM card), (SELECT count(*) FROM run), "
                              "(SELECT count(*) FROM event), (SELECT total_changes())")
            _rehearse_reads(conn)  # raises if any rehearsed read no longer fits its code
            after = conn.all("SELECT (SELECT count(*) FROM card), (SELECT count(*) FROM run), "
                             "(SELECT count(*) FROM event), (SELECT total_changes())")
        assert before == after
    finally:
        db.dispose()
