"""The column counts kept by triggers (card_count) always equal a count of the cards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kanban.cards import NewCard
from kanban.changes import changes_plan
from kanban.edits import CardEdit
from kanban.queries import status_counts
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.state.plans import run_plan
from kanban.state.store import Database
from kanban.states import CardStatus
from kanban.transitions import Actor
from tests.support.db import STORES, put_card_in

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def counted(db: Database) -> dict[tuple[str, str, str], int]:
    with db.read() as conn:
        return {(board, profile, status): int(n) for board, profile, status, n in conn.all(
            "SELECT board, profile, status, count(*) FROM card WHERE archived_at IS NULL "
            "GROUP BY board, profile, status")}


def kept(db: Database) -> dict[tuple[str, str, str], int]:
    with db.read() as conn:
        return {(board, profile, status): int(n) for board, profile, status, n in conn.all(
            "SELECT board, profile, status, sum(n) FROM card_count "
            "GROUP BY board, profile, status HAVING sum(n) != 0")}


def test_counts_follow_every_kind_of_change(kb: Kanban, db: Database) -> None:
    kb.create_board("other")
    first = (CardStatus.RUNNING, CardStatus.FAILED, CardStatus.DONE)  # each claims the only
    cards = {s: put_card_in(kb, s)                                   # ready card
             for s in (*first, *(s for s in CardStatus if s not in first))}
    assert kept(db) == counted(db)
    done = cards[CardStatus.DONE]
    kb.archive(done.id)  # leaves its column
    assert kept(db) == counted(db)
    kb.retry(done.id)  # back, unarchived, in another column
    assert kept(db) == counted(db)
    kb.edit(cards[CardStatus.READY].id, CardEdit(profile="coder"))  # moves between profiles
    assert kept(db) == counted(db)
    blocked = kb.add_card(NewCard("blocked later", board="other"))
    kb.cancel(blocked.id)
    with db.write() as conn:
        conn.run("DELETE FROM card WHERE id = :id", {"id": blocked.id})
    assert kept(db) == counted(db)
    with db.read() as conn:
        shown = status_counts(conn, "default")
    expected: dict[str, int] = {}
    for (board, _profile, status), n in counted(db).items():
        if board == "default":
            expected[status] = expected.get(status, 0) + n
    assert {s: n for s, n in shown.items() if n} == expected


def test_counts_written_by_many_server_processes_add_up(kb: Kanban, db: Database,
                                                        store: str) -> None:
    """PostgreSQL keeps each counter over shards, one per writing server process (migration
    20), so dispatchers do not queue on one counter row: cards claimed and finished by
    several connections at once still add up to a count of the cards."""
    for i in range(24):
        kb.add_card(NewCard(f"card {i}", profile="coder" if i % 2 else "writer"))
    writers: list[Database] = []
    shards: set[int] = set()
    try:
        while len(writers) < 4 or (store == "postgres" and len(shards) < 2 and
                                   len(writers) < 20):
            other = open_database(DbLocation(db.target, "flag"))
            writers.append(other)
            if store == "postgres":
                with other.read() as conn:
                    shards.add(int(conn.scalar("SELECT pg_backend_pid() % 8")))

        def work(other: Database) -> None:
            board = Kanban(other, clock=kb.clock)
            while claimed := board.claim(2, lease_s=60):
                for claim in claimed:
                    board.complete(claim.card_id, "ok", actor=Actor(
                        f"card:#{claim.card_id}", claim.claim_token))

        with ThreadPoolExecutor(len(writers)) as pool:
            list(pool.map(work, writers))
    finally:
        for other in writers:
            other.dispose()
    assert kept(db) == counted(db) == {("default", "coder", "done"): 12,
                                       ("default", "writer", "done"): 12}
    if store == "postgres":
        with db.read() as conn:
            assert conn.scalar("SELECT count(DISTINCT shard) FROM card_count") >= 2


def test_the_web_boards_counts_add_every_profile(kb: Kanban, db: Database) -> None:
    """A column's count on the live board is every profile's cards in it (it once showed
    one profile's)."""
    kb.add_card(NewCard("one", profile="coder"))
    kb.add_card(NewCard("two", profile="writer"))
    kb.add_card(NewCard("three"))
    with db.read() as conn:
        changes = run_plan(conn, changes_plan(0, now=kb.clock()))
    counts = changes.for_board("default").counts
    assert counts is not None and counts["ready"] == 3


def test_counts_follow_the_batched_paths(kb: Kanban, db: Database) -> None:
    """The batched statements a dispatcher and its group commit run: one claims 8 cards;
    one renews their leases (nothing moves, no counter row is written); one completes them
    all and promotes their dependents (two parts of one statement update `card`)."""
    from kanban.batch_writes import Completion, Renewal
    from kanban.group_commit import GroupCommitter

    parents = [kb.add_card(NewCard(f"parent {i}", profile="coder" if i % 2 else "writer"))
               for i in range(8)]
    for parent in parents:
        kb.add_card(NewCard(f"after {parent.id}", depends_on=[parent.id]))
    claimed = kb.claim(8, lease_s=60)
    assert {c.card_id for c in claimed} == {p.id for p in parents}
    assert kept(db) == counted(db)
    committer = GroupCommitter(db, kb.clock)
    with db.read() as conn:
        rows_before = conn.all("SELECT * FROM card_count ORDER BY 1, 2, 3, 4")
    for ack in committer.write_all([Renewal(c.card_id, c.claim_token, c.run_id, 60)
                                    for c in claimed]):
        ack.result(30)
    with db.read() as conn:
        assert conn.all("SELECT * FROM card_count ORDER BY 1, 2, 3, 4") == rows_before
    for ack in committer.write_all([Completion(c.card_id, c.claim_token, "ok",
                                               f"card:#{c.card_id}") for c in claimed]):
        ack.result(30)
    assert kept(db) == counted(db) == {("default", "coder", "done"): 4,
                                       ("default", "writer", "done"): 4,
                                       ("default", "default", "ready"): 8}
