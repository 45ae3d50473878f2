"""What a worker's tools are bound to: one board, one card, one claim token."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy import Connection

from kanban.errors import LeaseLost
from kanban.service import Kanban
from kanban.transitions import Actor, assert_lease


@dataclass
class WorkerScope:
    """The worker's own card and lease; every write through it is fenced."""

    kb: Kanban
    board: str
    card_id: int
    claim_token: str
    run_id: int
    lease_s: float = 30.0
    max_depth: int = 1
    max_children_per_card: int = 10
    on_lease_lost: Callable[[str], None] = field(default=lambda message: None)
    finished: str | None = None  # "completed" | "blocked" once a tool ended the card

    @property
    def actor(self) -> Actor:
        return Actor(f"card:#{self.card_id}", self.claim_token)

    @contextmanager
    def fenced(self) -> Iterator[Connection]:
        """A write transaction that first proves this worker still holds its lease."""
        try:
            with self.kb.db.write() as conn:
                assert_lease(conn, self.card_id, self.claim_token)
                yield conn
        except LeaseLost as exc:
            self.on_lease_lost(exc.message)
            raise
