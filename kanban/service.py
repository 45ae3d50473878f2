"""`Kanban`: the board API. Each method is one transaction over the functions of kanban/.

Modules that only some calls need (claims, pause control, read models, edits) are imported
in those methods: every `kanban` command imports this module, and starts faster for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from kanban import card_filter, cards, comments, dependencies, transitions, waiting
from kanban.cards import Added, NewCard
from kanban.errors import LeaseLost
from kanban.records import CardDetail, CardRecord, Claim
from kanban.state.store import Database
from kanban.transitions import USER, Actor

if TYPE_CHECKING:
    from kanban import control, queries
    from kanban.approvals import ApprovalRecord
    from kanban.claims import ClaimFilter
    from kanban.edits import CardEdit
    from kanban.gc import GcReport
    from kanban.inbox import Inbox
    from kanban.review import Verdict
    from kanban.search import SearchHit
    from kanban.stats import Stats
    from kanban.swarms import NewSwarm, Swarm
    from kanban.workspaces import Workspace


class Kanban:
    """The board domain over one database. Library errors are KanbanError subclasses."""

    def __init__(self, db: Database, *, clock: Callable[[], datetime] | None = None) -> None:
        self.db = db
        # The store's clock by default: PostgreSQL's server clock, so every host agrees.
        self.clock = clock or db.clock

    # boards
    def create_board(self, name: str, *, on_dependency_failure: str = "block") -> bool:
        with self.db.write() as conn:
            return cards.create_board(conn, name, self.clock(),
                                      on_dependency_failure=on_dependency_failure)

    def set_dependency_policy(self, board: str, policy: str) -> bool:
        """The board's default for what a card does when a dependency fails or is cancelled."""
        with self.db.write() as conn:
            return cards.set_dependency_policy(conn, board, policy, self.clock())

    def ensure_board(self, name: str) -> None:
        with self.db.write() as conn:
            cards.create_board(conn, name, self.clock())

    def boards(self) -> list[dict[str, object]]:
        with self.db.read() as conn:
            return cards.list_boards(conn)

    # cards
    def add_card(self, new: NewCard) -> CardRecord:
        return self.add(new).card

    def add(self, new: NewCard) -> Added:
        """Add a card; `created` is False when an unfinished card already held its key."""
        with self.db.write() as conn:
            return cards.add(conn, new, self.clock())

    def card(self, card_id: int, *, board: str | None = None) -> CardRecord:
        with self.db.read() as conn:
            return cards.get_card(conn, card_id, board=board)

    def detail(self, card_id: int, *, board: str | None = None) -> CardDetail:
        with self.db.read() as conn:
            return cards.card_detail(conn, card_id, board=board)

    def list_cards(self, *, board: str | None = None, statuses: Sequence[str] = (),
                   include_archived: bool = False, limit: int | None = None) -> list[CardRecord]:
        with self.db.read() as conn:
            return card_filter.list_cards(conn, board=board, statuses=statuses,
                                          include_archived=include_archived, limit=limit)

    def card_page(self, flt: card_filter.CardFilter, limit: int) -> queries.CardPage:
        """The newest `limit` cards the filter matches, and how many it matches."""
        from kanban import queries

        with self.db.read() as conn:
            return queries.card_page(conn, flt, limit)

    @contextmanager
    def stream_cards(self, flt: card_filter.CardFilter) -> Iterator[Iterator[CardRecord]]:
        """Every card the filter matches, newest first, read from one snapshot in batches."""
        from kanban import queries

        with self.db.read() as conn:
            yield queries.iter_cards(conn, flt)

    def edit(self, card_id: int, edit: CardEdit, *, actor: str = "user",
             ) -> tuple[CardRecord, list[str]]:
        from kanban.edits import edit_card

        with self.db.write() as conn:
            return edit_card(conn, card_id, edit, now=self.clock(), actor=actor)

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
            return comments.add_comment(conn, card_id, body, now=self.clock(), actor=actor,
                                        author=author or (actor.name if actor else "user"))

    # transitions
    def complete(self, card_id: int, summary: str, *, actor: Actor = USER,
                 implicit: bool = False, gated: bool | None = None,
                 verdict: Verdict | None = None) -> CardRecord:
        """`gated`: whether the caller's card has a review gate, when it knows (a gated card
        goes to review, not done)."""
        if actor.claim_token is not None and self.db.dialect == "postgresql" and not gated:
            from kanban import pg_statements  # one statement, promotions included

            try:
                return pg_statements.complete(self.db, card_id, summary, now=self.clock(),
                                              claim_token=actor.claim_token, actor=actor.name,
                                              implicit=implicit)
            except LeaseLost:  # or gated, or awaited: the general path below says which
                pass
        with self.db.write() as conn:
            transitions.complete(conn, card_id, summary, now=self.clock(), actor=actor,
                                 implicit=implicit, gated=gated, verdict=verdict)
            return cards.get_card(conn, card_id)

    def resume_settled(self) -> list[int]:
        """Safety net: waiting cards whose children have all finished go back to ready.
        Looked for under a read snapshot first: a dispatcher's every tick asks, and on a
        board with no waiting card takes no write lock for it."""
        with self.db.read() as conn:
            if not waiting.any_waiting(conn):
                return []
        with self.db.write() as conn:
            return waiting.resume_settled(conn, now=self.clock())

    # triage
    def triage_new(self, new: NewCard, *, decomposer: str, catalog: str) -> Added:
        """Add a card in triage with a card for the decomposer profile's agent."""
        from kanban import triage

        with self.db.write() as conn:
            return triage.add_triaged(conn, new, decomposer=decomposer, catalog=catalog,
                                      now=self.clock())

    def triage(self, card_id: int, *, decomposer: str, catalog: str,
               actor: Actor = USER) -> CardRecord:
        """Send a card nobody started to triage, for the decomposer profile's agent."""
        from kanban import triage

        with self.db.write() as conn:
            return triage.triage(conn, card_id, decomposer=decomposer, catalog=catalog,
                                 now=self.clock(), actor=actor)

    # review gates
    def approve_review(self, card_id: int, *, note: str | None = None,
                       actor: Actor = USER) -> CardRecord:
        """Pass a card's review gate: it is done and its dependents may start."""
        from kanban import review

        with self.db.write() as conn:
            return review.approve(conn, card_id, now=self.clock(), actor=actor, note=note)

    def reject(self, card_id: int, feedback: str, *, actor: Actor = USER) -> CardRecord:
        """Send a card in review back for another attempt with `feedback`."""
        from kanban import review

        with self.db.write() as conn:
            return review.reject(conn, card_id, feedback, now=self.clock(), actor=actor)

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

    def retry_all(self, board: str, status: str, *,
                  since: datetime | None = None) -> tuple[list[int], list[str]]:
        """Requeue every `status` card of a board (finished since `since`) in one go."""
        from kanban.cards import require_board
        from kanban.states import CardStatus

        with self.db.write() as conn:
            require_board(conn, board)
            return transitions.retry_all(conn, board, CardStatus(status), now=self.clock(),
                                         since=since)

    def archive(self, card_id: int) -> CardRecord:
        with self.db.write() as conn:
            return transitions.archive(conn, card_id, now=self.clock())

    def release_due(self) -> list[int]:
        """Scheduled cards whose time came join the queue (claims do this too)."""
        from kanban import claims

        with self.db.write() as conn:
            return claims.release_due(conn, now=self.clock())

    def promote_ready(self) -> list[int]:
        """The safety sweep behind the promotions completions make: found under a read
        snapshot, promoted in small write transactions (rechecked there)."""
        with self.db.read() as conn:
            found = dependencies.promotable(conn)
        promoted: list[int] = []
        for start in range(0, len(found), dependencies.SWEEP_BATCH):
            with self.db.write() as conn:
                promoted += dependencies.promote_ready(
                    conn, self.clock(), candidates=found[start:start + dependencies.SWEEP_BATCH])
        return promoted

    def collect_garbage(self, home: Path, *, older_than: timedelta, batch: int = 500,
                        board: str | None = None,
                        remove_worktree: Callable[[Path], bool] | None = None) -> GcReport:
        """Archive finished cards older than `older_than` and prune what they left behind,
        in short write transactions (see kanban.gc); `remove_worktree` removes a git
        worktree checked out for one of them."""
        from kanban import gc

        return gc.collect(self.db, home, older_than=older_than, now=self.clock(),
                          board=board, batch=batch, remove_worktree=remove_worktree)

    def create_swarm(self, new: NewSwarm) -> Swarm:
        """Workers, verifier and synthesizer (and a planner without parts): one transaction."""
        from kanban import swarms

        with self.db.write() as conn:
            return swarms.create_swarm(conn, new, self.clock())

    def swarm(self, synthesizer_id: int) -> Swarm:
        from kanban import swarms

        with self.db.read() as conn:
            return swarms.swarm_of(conn, synthesizer_id)

    # approvals of dangerous commands (and, later, of review gates)
    def approve(self, card_id: int, *, actor: Actor = USER,
                reason: str | None = None) -> CardRecord:
        """Pass the review gate of a card in review; otherwise approve the card's pending
        commands (its next attempt runs them without asking)."""
        from kanban import approvals, review

        with self.db.write() as conn:
            if review.in_review(conn, card_id):
                return review.approve(conn, card_id, now=self.clock(), actor=actor, note=reason)
            return approvals.decide(conn, card_id, approve=True, now=self.clock(),
                                    actor=actor, reason=reason)[0]

    def deny(self, card_id: int, *, reason: str | None = None,
             actor: Actor = USER) -> CardRecord:
        """Deny the card's pending commands; its next attempt is told so."""
        from kanban import approvals

        with self.db.write() as conn:
            return approvals.decide(conn, card_id, approve=False, now=self.clock(),
                                    actor=actor, reason=reason)[0]

    def inbox(self, *, board: str | None = None, limit: int = 100) -> Inbox:
        """Every card waiting on a person (approvals, reviews, triage, blocks), oldest first."""
        from kanban.inbox import inbox_plan
        from kanban.state.plans import run_plan

        with self.db.read() as conn:
            return run_plan(conn, inbox_plan(board, limit=limit))

    def approvals(self, card_id: int) -> list[ApprovalRecord]:
        from kanban import approvals

        with self.db.read() as conn:
            cards.get_card(conn, card_id)
            return approvals.for_card(conn, card_id)

    def workspace(self, card_id: int, home: Path,
                  defaults: Mapping[str, str | None] | None = None) -> Workspace:
        """Where the card's worker runs (or ran)."""
        from kanban.workspaces import resolve

        with self.db.read() as conn:
            cards.get_card(conn, card_id)
            return resolve(conn, card_id, home, defaults)

    # claims and leases
    def claim(self, n: int, *, lease_s: float, flt: ClaimFilter | None = None,
              dispatcher_id: int | None = None, host: str | None = None) -> list[Claim]:
        if self.db.dialect == "postgresql":  # one statement: SKIP LOCKED, runs, events
            from kanban import pg_statements

            return pg_statements.claim(self.db, n, now=self.clock(), lease_s=lease_s, flt=flt,
                                       dispatcher_id=dispatcher_id, host=host)
        from kanban import claims

        with self.db.write() as conn:
            return claims.claim(conn, n, now=self.clock(), lease_s=lease_s,
                                flt=flt or claims.ClaimFilter(),
                                dispatcher_id=dispatcher_id, host=host)

    def heartbeat(self, card_id: int, claim_token: str, *, run_id: int, lease_s: float,
                  note: str | None = None) -> datetime:
        if self.db.dialect == "postgresql":  # one statement
            from kanban import pg_statements

            return pg_statements.heartbeat(self.db, card_id, claim_token, run_id=run_id,
                                           lease_s=lease_s, now=self.clock(), note=note)
        from kanban import claims

        with self.db.write() as conn:
            return claims.heartbeat(conn, card_id, claim_token, run_id=run_id, lease_s=lease_s,
                                    now=self.clock(), note=note)

    # pause
    def set_paused(self, paused: bool, *, board: str | None = None) -> None:
        from kanban import control

        with self.db.write() as conn:
            control.set_paused(conn, paused, board=board, now=self.clock())

    def pause_state(self, board: str | None = None) -> control.PauseState:
        from kanban import control

        with self.db.read() as conn:
            return control.pause_state(conn, board)

    # views
    def board_snapshot(self, board: str, *, per_column: int = 20,
                       statuses: Sequence[str] = ()) -> queries.BoardSnapshot:
        """The board's columns (only `statuses`' when given) with their first cards."""
        from kanban import queries

        with self.db.read() as conn:
            return queries.board_snapshot(conn, board, now=self.clock(), per_column=per_column,
                                          statuses=statuses)

    def search(self, text: str, *, board: str | None = None, statuses: Sequence[str] = (),
               include_archived: bool = False, limit: int = 20) -> list[SearchHit]:
        from kanban import search

        with self.db.read() as conn:
            return search.search(conn, text, board=board, statuses=statuses,
                                 include_archived=include_archived, limit=limit)

    def stats(self, *, board: str | None = None) -> Stats:
        from kanban import stats

        with self.db.read() as conn:
            return stats.stats(conn, self.clock(), board=board)
