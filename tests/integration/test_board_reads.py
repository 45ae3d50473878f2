"""Read models as plans: the same answers from the sync store and the async one, on every store.

The web board reads through kanban.state.aio and the CLI through Conn; both run the very
same plans, so their JSON must be identical. Also: column pages (keyset), filters, and the
live board's change read.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kanban import claims
from kanban.card_filter import CardFilter, list_cards_plan
from kanban.cards import NewCard, boards_plan, card_detail_plan
from kanban.changes import changes_plan, headers_plan
from kanban.columns import column_plan
from kanban.errors import CardNotFound, DatabaseError, ValidationError
from kanban.queries import board_snapshot_plan, card_page_plan, event_cursor_plan
from kanban.readmodels import child_tree_plan, transcript_plan
from kanban.service import Kanban
from kanban.state.aio import AsyncDatabase, open_async
from kanban.state.plans import Plan, Query, run_plan
from kanban.state.store import Database
from kanban.states import CardStatus
from tests.support.db import STORES, FakeClock, claim_one, put_card_in

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def sync(db: Database, plan: Plan[Any]) -> Any:
    with db.read() as conn:
        return run_plan(conn, plan)


def both(db: Database, make: Any) -> tuple[Any, Any]:
    """A plan's answer from the sync store and from the async store."""

    async def read() -> Any:
        adb = open_async(db)
        try:
            return await adb.run(make())
        finally:
            await adb.close()

    return sync(db, make()), asyncio.run(read())


def busy_board(kb: Kanban) -> dict[str, int]:
    """A card in every state, a dependency, a child, a comment and a transcript."""
    first = (CardStatus.RUNNING, CardStatus.FAILED)  # they claim the only ready card
    ids = {str(s): put_card_in(kb, s).id
           for s in (*first, *(s for s in CardStatus if s not in first))}
    lead = kb.add_card(NewCard("lead", goal="split it", priority=10))
    child = kb.add_card(NewCard("child", parent_id=lead.id))
    kb.add_card(NewCard("grandchild", parent_id=child.id))
    kb.comment(lead.id, "a <b>hostile</b> comment")
    claim = claim_one(kb, lead.id)
    with kb.db.write() as conn:
        claims.append_message(conn, claim.run_id, 1, {"role": "user", "content": "go"},
                              now=kb.clock())
        claims.append_message(conn, claim.run_id, 2, {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "a", "function": {"name": "kanban_show", "arguments": "{}"}}]},
            now=kb.clock())
    ids["lead"] = lead.id
    return ids


def test_every_read_model_is_the_same_on_both_drivers(kb: Kanban, db: Database,
                                                      clock: FakeClock) -> None:
    ids = busy_board(kb)
    now = clock()
    reads = {
        "board": lambda: board_snapshot_plan("default", now=now, per_column=3),
        "boards": boards_plan,
        "list": lambda: list_cards_plan(CardFilter(board="default")),
        "page": lambda: card_page_plan(CardFilter(board="default"), 3),
        "detail": lambda: card_detail_plan(ids["lead"]),
        "log": lambda: transcript_plan(ids["lead"]),
        "tree": lambda: child_tree_plan(ids["lead"]),
        "changes": lambda: changes_plan(0, now=now),
        "column": lambda: column_plan("default", "ready", limit=2),
    }
    for name, make in reads.items():
        plain, async_ = both(db, make)
        assert plain == async_, name
    snapshot = sync(db, board_snapshot_plan("default", now=now))
    assert snapshot.to_json() == kb.board_snapshot("default").to_json()
    (tree,) = sync(db, child_tree_plan(ids["lead"]))
    assert [n.card.title for n in tree.children] == ["grandchild"]


def test_a_column_pages_by_keyset_in_board_order(kb: Kanban, db: Database) -> None:
    made = [kb.add_card(NewCard(f"c{i}", priority=i % 4)).id for i in range(23)]
    everything = sync(db, column_plan("default", "ready", limit=500)).cards
    order = [c.id for c in everything]
    assert order == sorted(made, key=lambda i: (-((i - made[0]) % 4), i))
    seen: list[int] = []
    after = None
    while True:
        page = sync(db, column_plan("default", "ready", limit=5, after=after))
        seen += [c.id for c in page.cards]
        if page.next is None:
            break
        after = page.next
        if len(seen) == 10:  # a card arriving ahead of the cursor does not shift the pages
            kb.add_card(NewCard("late, urgent", priority=9))
    assert seen == order


def test_finished_columns_page_newest_first(kb: Kanban, db: Database, clock: FakeClock) -> None:
    done = []
    for i in range(7):
        card = kb.add_card(NewCard(f"d{i}"))
        if i % 3 == 0:
            clock.advance(1)  # some finish at the same moment: ties go by id, newest first
        kb.complete(card.id, "ok")
        done.append(card.id)
    pages, after = [], None
    while True:
        page = sync(db, column_plan("default", "done", limit=3, after=after))
        pages += [c.id for c in page.cards]
        if not page.next:
            break
        after = page.next
    full = [c.id for c in sync(db, column_plan("default", "done", limit=50)).cards]
    assert pages == full and sorted(full) == sorted(done)
    assert full[0] == done[-1]
    with pytest.raises(ValidationError, match="invalid page cursor"):
        sync(db, column_plan("default", "done", after="yesterday~3"))


def test_filters_match_text_literally_and_ids(kb: Kanban, db: Database) -> None:
    a = kb.add_card(NewCard("Fix 100% of the_bugs", profile="coder"))
    kb.add_card(NewCard("Fix 1000 of thexbugs"))
    c = kb.add_card(NewCard("Write docs"))

    def titles(**flt: Any) -> list[str]:
        cards = sync(db, list_cards_plan(CardFilter(board="default", **flt)))
        return [x.title for x in cards]

    assert titles(text="100%") == ["Fix 100% of the_bugs"]
    assert titles(text="THE_BUGS") == ["Fix 100% of the_bugs"]
    assert titles(text=f"#{c.id}") == ["Write docs"]
    assert titles(profile="coder") == [a.title]
    assert titles(before=c.id) == ["Fix 100% of the_bugs", "Fix 1000 of thexbugs"]


def test_changes_name_what_a_viewer_lacks(kb: Kanban, db: Database, clock: FakeClock) -> None:
    now = clock()
    start = sync(db, event_cursor_plan())
    nothing = sync(db, changes_plan(start, now=now))
    assert (nothing.cursor, nothing.boards, nothing.reset) == (start, {}, False)

    card = kb.add_card(NewCard("new"))
    added = sync(db, changes_plan(start, now=now))
    part = added.for_board("default")
    assert [c.id for c in part.cards] == [card.id]
    assert part.counts is not None and part.counts["ready"] == 1
    assert added.cursor > start

    claim = claim_one(kb, card.id)
    claimed = sync(db, changes_plan(added.cursor, now=now))
    assert claimed.running == {card.id}
    clock.advance(5)
    kb.heartbeat(card.id, claim.claim_token, run_id=claim.run_id, lease_s=30)
    beat = sync(db, changes_plan(claimed.cursor, now=now, running=claimed.running))
    (running,) = beat.for_board("default").cards
    assert running.heartbeat_at == clock() and beat.for_board("default").counts is None

    kb.complete(card.id, "ok")
    kb.archive(card.id)
    kb.set_paused(True, board="default")
    later = sync(db, changes_plan(beat.cursor, now=now, running=beat.running))
    assert later.for_board("default").removed == [card.id]
    assert later.headers["default"].paused and not later.headers["default"].paused_globally
    assert later.for_board("default").counts == {s: 0 for s in CardStatus}


def test_a_viewer_too_far_behind_or_ahead_is_told_to_reload(kb: Kanban, db: Database,
                                                            clock: FakeClock) -> None:
    for i in range(4):
        kb.add_card(NewCard(f"c{i}"))
    newest = sync(db, event_cursor_plan())
    assert sync(db, changes_plan(0, now=clock(), limit=2)).reset
    ahead = sync(db, changes_plan(newest + 100, now=clock()))
    assert ahead.reset and ahead.cursor == newest


def test_headers_say_pause_and_dispatchers(kb: Kanban, db: Database, clock: FakeClock) -> None:
    kb.create_board("ops")
    kb.set_paused(True)
    headers = sync(db, headers_plan(clock()))
    assert set(headers) == {"default", "ops"}
    assert all(h.paused_globally and not h.board_paused for h in headers.values())


def test_the_async_store_only_reads_and_survives_refusals(kb: Kanban, db: Database) -> None:
    card = kb.add_card(NewCard("x"))

    async def scenario() -> None:
        adb: AsyncDatabase = open_async(db, size=2)
        try:
            with pytest.raises(CardNotFound):
                await adb.run(card_detail_plan(card.id + 100))
            # many readers share two connections, in parallel
            details = await asyncio.gather(*(adb.run(card_detail_plan(card.id))
                                             for _ in range(12)))
            assert {d.card.id for d in details} == {card.id}
            assert adb.queries > 12

            def write() -> Plan[None]:
                yield Query("UPDATE card SET title = 'changed' WHERE id = :id", {"id": card.id})

            with pytest.raises(DatabaseError):
                await adb.run(write())
            assert (await adb.run(card_detail_plan(card.id))).card.title == "x"
        finally:
            await adb.close()

    asyncio.run(scenario())
    assert kb.card(card.id).title == "x"


def test_the_scheduled_column_pages_by_due_time(kb: Kanban, db: Database,
                                                clock: FakeClock) -> None:
    from datetime import timedelta

    due = [5, 1, 3, 1, 4]  # hours ahead; two cards share a time (ties go by id)
    ids = [kb.add_card(NewCard(f"s{i}", run_at=clock() + timedelta(hours=h))).id
           for i, h in enumerate(due)]
    expected = [i for _, i in sorted(zip(due, ids, strict=True))]
    seen, after = [], None
    while True:
        page = sync(db, column_plan("default", "scheduled", limit=2, after=after))
        seen += [c.id for c in page.cards]
        if not page.next:
            break
        after = page.next
    assert seen == expected
    assert all(c.to_json()["due_at"] for c in page.cards)
