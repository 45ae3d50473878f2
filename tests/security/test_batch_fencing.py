"""Attacks on group commit (kanban.group_commit): a worker that holds one claim token tries
to write to another card by slipping the write into a batch beside its own legitimate
ones. Each write is fenced by its own card's token, so the stranger's card is untouched
while the attacker's own writes still commit."""

from __future__ import annotations

import pytest

from kanban.batch_writes import ActivityWrite, Completion, Renewal, Write
from kanban.cards import NewCard
from kanban.errors import LeaseLost
from kanban.group_commit import GroupCommitter
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, card_row, events_of, runs_of


@pytest.mark.parametrize("store", STORES, indirect=True)
def test_a_worker_cannot_write_to_another_card_from_inside_a_batch(
        kb: Kanban, db: Database) -> None:
    kb.add_card(NewCard("mine"))
    kb.add_card(NewCard("victim"))
    mine, victim = kb.claim(2, lease_s=30)
    token = mine.claim_token  # all the attacker knows
    attacks: list[Write] = [
        Completion(victim.card_id, token, "pwned'); DROP TABLE card; --", "card:#1"),
        Renewal(victim.card_id, token, victim.run_id, 86_400, note="<script>x</script>"),
        ActivityWrite(victim.card_id, token, victim.run_id, {"phase": "owned"}),
        # its own run id with the victim's card, and the victim's run with its own card
        ActivityWrite(victim.card_id, token, mine.run_id, {"phase": "owned"}),
        ActivityWrite(mine.card_id, token, victim.run_id, {"phase": "owned"}),
    ]
    before = card_row(db, victim.card_id)
    tickets = GroupCommitter(kb.db, kb.clock).write_all(
        [Renewal(mine.card_id, token, mine.run_id, 30), *attacks,
         Completion(mine.card_id, token, "honest work", "card:#1")])
    assert tickets[0].result() is not None and tickets[-1].result() is None
    assert all(isinstance(t.exception(), LeaseLost) for t in tickets[1:-1])
    assert card_row(db, victim.card_id) == before
    (victim_run,) = runs_of(db, victim.card_id)
    assert victim_run["activity"] is None and victim_run["progress"] is None
    assert [e["kind"] for e in events_of(db, victim.card_id)] == ["created", "claimed"]
    assert card_row(db, mine.card_id)["status"] == "done"
    assert runs_of(db, mine.card_id)[0]["activity"] is None  # the victim's run id was refused
