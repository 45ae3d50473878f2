"""`Kanban`: the board API. Each method is one transaction over the functions of kanban/."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from kanban import cards, claims, control, dependencies, queries, transitions
from kanban.cards import NewCard
from kanban.records import CardDetail, CardRecord, Claim
from kanban.transitions import USER, Actor
from state.engine import Database
from state.timeutil import utcnow


class Kanban:
    """The board domain over one database. Library errors are KanbanError subclasses."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    # boards
    def create_board(self, name: str) -> bool:
        with self.db.write() as conn:
            return cards.create_board(conn, name, self.clock())

    def ensure_board(self, name: str) -> None:
        with self.db.write() as conn:
            cards.create_board(conn, name, self.clock())

    def boards(self) -> list[dict[str, object]]:
        with self.db.read() as conn:
            return cards.list_boards(conn)

    # cards
    def add_card(self, new: NewCard) -> CardRecord:
        with self.db.write() as conn:
            return cards.add_card(conn, new, self.clock())

    def card(self, card_id: int, *, board: str | None = None) -> CardRecord:
        with self.db.read() as conn:
            return cards.get_card(conn, card_id, board=board)

    def detail(self, card_id: int, *, board: str | None = None) -> CardDetail:
        with self.db.read() as conn:
            return cards.card_detail(conn, card_id, board=board)

    def list_cards(self, *, board: str | None = None, statuses: Sequence[str] = (),
                   include_archived: bool = False, limit: int | None = None) -> list[CardRecord]:
        with self.db.read() as conn:
            return cards.list_cards(conn, board=board, statuses=statuses,
                                    include_archived=include_archived, limit=limit)

    def link(self, card_id: int, depends_on_id: int, *, actor: str = "user") -> bool:
        with self.db.write() as conn:
            return dependencies.link(conn, card_id, depends_on_id, actor=actor, now=self.clock())

    def unlink(self, card_id: int, depends_on_id: int, *, actor: str = "user") -> None:
        with self.db.write() as conn:
            dependencies.unlink(conn, card_id, depends_on_id, actor=actor, now=self.clock())

    def comment(self, card_id: int, body: str, *, author: str | None = None,
                actor: Actor | None = None) -> int:
        """Comment on a card; a worker's actor makes the comment fenced by its lease."""
        with self.db.write() as conn:
            return transitions.add_comment(conn, card_id, body, now=self.clock(), actor=actor,
                                           author=author or (actor.name if actor else "user"))

    # transitions
    def complete(self, card_id: int, summary: str, *, actor: Actor = USER) -> CardRecord:
        with self.db.write() as conn:
            return transitions.complete(conn, card_id, summary, now=self.clock(), actor=actor)

    def block(self, card_id: int, reason: str, *, actor: Actor = USER) -> CardRecord:
        with self.db.write() as conn:
            return transitions.block(conn, card_id, reason, now=self.clock(), actor=actor)

    def unblock(self, card_id: int, note: str | None = None) -> CardRecord:
        with self.db.write() as conn:
            return transitions.unblock(conn, card_id, note, now=self.clock())

    def cancel(self, card_id: int, *, reason: str | None = None,
               actor: Actor = USER) -> CardRecord:
        with self.db.write() as conn:
            return transitions.cancel(conn, card_id, now=self.clock(), reason=reason, actor=actor)

    def retry(self, card_id: int) -> CardRecord:
        with self.db.write() as conn:
            return transitions.retry(conn, card_id, now=self.clock())

    def archive(self, card_id: int) -> CardRecord:
        with self.db.write() as conn:
            return transitions.archive(conn, card_id, now=self.clock())

    def promote_ready(self) -> list[int]:
        with self.db.write() as conn:
            return dependencies.promote_ready(conn, self.clock())

    # claims and leases
    def claim(self, n: int, *, lease_s: float, flt: claims.ClaimFilter = claims.ClaimFilter(),
              dispatcher_id: int | None = None, host: str | None = None) -> list[Claim]:
        with self.db.write() as conn:
            return claims.claim(conn, n, now=self.clock(), lease_s=lease_s, flt=flt,
                                dispatcher_id=dispatcher_id, host=host)

    def heartbeat(self, card_id: int, claim_token: str, *, run_id: int, lease_s: float,
                  note: str | None = None) -> datetime:
        with self.db.write() as conn:
            return claims.heartbeat(conn, card_id, claim_token, run_id=run_id, lease_s=lease_s,
                                    now=self.clock(), note=note)

    # pause
    def set_paused(self, paused: bool, *, board: str | None = None) -> None:
        with self.db.write() as conn:
            control.set_paused(conn, paused, board=board, now=self.clock())

    def pause_state(self, board: str | None = None) -> control.PauseState:
        with self.db.read() as conn:
            return control.pause_state(conn, board)

    # views
    def board_snapshot(self, board: str, *, per_column: int = 20) -> queries.BoardSnapshot:
        with self.db.read() as conn:
            return queries.board_snapshot(conn, board, now=self.clock(), per_column=per_column)
