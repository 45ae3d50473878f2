"""Creating and reading cards and boards."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban import validation as v
from kanban.card_types import ROLES, VERIFY, Gate
from kanban.dependencies import block_on, check_link, ended_dependency, unfinished_dependencies
from kanban.errors import BoardNotFound, CardNotFound, ValidationError
from kanban.events import record_event
from kanban.records import (
    RUNS_OF_CARD,
    AttachmentRecord,
    CardDetail,
    CardRecord,
    CommentRecord,
    EventRecord,
    RunRecord,
    row_reader,
)
from kanban.state.plans import Plan, Query, Rows, in_list, run_plan
from kanban.state.rows import with_times
from kanban.state.store import Conn
from kanban.states import CardStatus
from kanban.workspaces import PARENT, parse_spec

CARD_COLUMNS = (
    "id", "board", "title", "goal", "context", "status", "priority", "profile", "model",
    "toolsets", "parent_id", "depth", "created_by", "attempt", "max_attempts", "retry_base",
    "timeout_s", "run_after", "claim_token", "lease_expires_at", "result", "error",
    "input_tokens", "output_tokens", "cached_tokens", "created_at", "updated_at", "started_at",
    "finished_at", "archived_at", "command", "cost", "key", "skills", "workspace",
    "role", "waiting_on", "resume_base", "review", "max_reviews", "reviews", "feedback",
    "subject_id", "on_dependency_failure",
)
_CARD_SELECT = f"SELECT {', '.join(CARD_COLUMNS)} FROM card"
CARD_SELECT = _CARD_SELECT  # for read models elsewhere (kanban.queries)


@dataclass(frozen=True)
class NewCard:
    """What a caller supplies to create a card."""

    title: str
    goal: str = ""
    context: str = ""
    board: str = "default"
    priority: int = 0
    profile: str = "default"
    depends_on: Sequence[int] = ()
    max_attempts: int = 3
    timeout_s: float | None = None
    parent_id: int | None = None
    created_by: str = "user"
    model: str | None = None
    toolsets: str | None = None
    command: str | None = None  # a shell command the worker runs instead of an agent
    key: str | None = None  # idempotency: an unfinished card with this key is returned instead
    run_at: datetime | None = None  # scheduled: not claimed before this time
    skills: tuple[str, ...] = ()
    workspace: str | None = None  # stored form (see kanban.workspaces.normalise_spec)
    role: str = "leaf"  # orchestrator: may delegate (see kanban.children); reviewer, decomposer,
    # triaged: set by kanban.review and kanban.triage
    review: str | None = None  # a review gate (kanban.card_types.Gate): verify:CMD, reviewer:P,
    # or human
    max_reviews: int = 3
    subject_id: int | None = None
    triage: bool = False  # a rough idea: the card waits in triage for a decomposer
    on_dependency_failure: str | None = None  # block | cancel; None: the board's

    def validated(self) -> NewCard:
        v.title(self.title)
        v.text(self.goal, "goal", v.MAX_GOAL)
        v.text(self.context, "context", v.MAX_CONTEXT)
        v.number(self.priority, "priority", v.PRIORITY_RANGE)
        v.number(self.max_attempts, "max attempts", v.MAX_ATTEMPTS_RANGE)
        if self.timeout_s is not None:
            v.number(self.timeout_s, "timeout", v.TIMEOUT_RANGE)
        if self.command is not None:
            v.text(self.command, "command", v.MAX_GOAL, required=True)
        if not v.BOARD_NAME.match(self.profile):
            raise ValidationError(f"invalid profile name {self.profile!r}")
        if self.key is not None:
            v.key(self.key)
        if self.run_at is not None and self.run_at.tzinfo is None:
            raise ValidationError("a scheduled time must carry a timezone")
        v.skill_names(tuple(self.skills))
        if self.role not in ROLES:
            raise ValidationError(f"unknown role {self.role!r} (known: {', '.join(ROLES)})")
        parse_spec(self.workspace)
        if (self.review is not None and Gate.parse(self.review).kind == VERIFY
                and self.command is not None):
            raise ValidationError("a script card's exit code is its own check: give it "
                                  "no verify gate")
        v.number(self.max_reviews, "max reviews", v.MAX_ATTEMPTS_RANGE)
        if self.on_dependency_failure is not None:
            v.dependency_policy(self.on_dependency_failure)
        return self


@dataclass(frozen=True)
class Added:
    """The card an add returned, and whether it was created (False: its key matched)."""

    card: CardRecord
    created: bool


def require_board(conn: Conn, board: str) -> None:
    run_plan(conn, require_board_plan(board))


def require_board_plan(board: str) -> Plan[None]:
    rows = yield Query("SELECT name FROM board WHERE name = :b", {"b": board})
    if not rows:
        raise BoardNotFound(board)


def create_board(conn: Conn, name: str, now: datetime, *,
                 on_dependency_failure: str = "block") -> bool:
    """Create a board; False if it already existed (its settings are left as they are)."""
    v.board_name(name)
    v.dependency_policy(on_dependency_failure)
    # ON CONFLICT: concurrent creators (eight `kanban init` at once) all succeed.
    if conn.one("INSERT INTO board (name, paused, created_at, on_dependency_failure) VALUES "
                "(:name, :paused, :now, :policy) ON CONFLICT (name) DO NOTHING RETURNING name",
                {"name": name, "paused": False, "now": now,
                 "policy": on_dependency_failure}) is None:
        return False
    record_event(conn, board=name, kind="board_created", actor="user", at=now,
                 on_dependency_failure=on_dependency_failure)
    return True


def set_dependency_policy(conn: Conn, board: str, policy: str, now: datetime, *,
                          actor: str = "user") -> bool:
    """Set the board's default `on_dependency_failure`; False if it was that already."""
    v.dependency_policy(policy)
    old = conn.scalar("SELECT on_dependency_failure FROM board WHERE name = :b", {"b": board})
    if old is None:
        raise BoardNotFound(board)
    if old == policy:
        return False
    conn.run("UPDATE board SET on_dependency_failure = :p WHERE name = :b",
             {"p": policy, "b": board})
    record_event(conn, board=board, kind="board_edited", actor=actor, at=now,
                 on_dependency_failure={"from": old, "to": policy})
    return True


def list_boards(conn: Conn) -> list[dict[str, object]]:
    return run_plan(conn, boards_plan())


def boards_plan() -> Plan[list[dict[str, object]]]:
    """Every board with its card count, pause flag and dependency-failure policy
    (`kanban boards --json`)."""
    # Counted from card_count (kept by the card triggers), not by counting every card.
    rows = yield Query(
        "SELECT b.name, b.paused, (SELECT coalesce(sum(n), 0) FROM card_count cc "
        "WHERE cc.board = b.name), b.on_dependency_failure FROM board b ORDER BY b.name")
    return [{"name": name, "paused": bool(paused), "cards": int(cards),
             "on_dependency_failure": policy} for name, paused, cards, policy in rows]


_INSERT_CARD = """
INSERT INTO card (board, title, goal, context, status, priority, profile, model, toolsets,
                  parent_id, depth, created_by, attempt, max_attempts, retry_base, timeout_s,
                  run_after, created_at, updated_at, input_tokens, output_tokens, cached_tokens,
                  command, key, skills, workspace, role, review, max_reviews, reviews,
                  subject_id, on_dependency_failure)
VALUES (:board, :title, :goal, :context, :status, :priority, :profile, :model, :toolsets,
        :parent_id, :depth, :created_by, 0, :max_attempts, 0, :timeout_s,
        :run_after, :now, :now, 0, 0, 0, :command, :key, :skills, :workspace, :role, :review,
        :max_reviews, 0, :subject_id, :on_dependency_failure)
"""
# A concurrent add with the same key (PostgreSQL; SQLite writers take turns) inserts
# nothing: the index below holds one unfinished card per board and key.
_ON_KEY_CONFLICT = """
ON CONFLICT (board, key) WHERE key IS NOT NULL AND status NOT IN ('done', 'failed', 'cancelled')
DO NOTHING
"""
_BY_KEY = (f"{_CARD_SELECT} WHERE board = :board AND key = :key AND key IS NOT NULL "
           "AND status NOT IN ('done', 'failed', 'cancelled')")


def add_card(conn: Conn, new: NewCard, now: datetime) -> CardRecord:
    """Create a card (or return the unfinished card holding its key)."""
    return add(conn, new, now).card


def add(conn: Conn, new: NewCard, now: datetime) -> Added:
    """Create a card; with a key, an unfinished card of the board holding it is returned."""
    new = new.validated()
    require_board(conn, new.board)
    if new.key is not None and (existing := card_with_key(conn, new.board, new.key)):
        return Added(existing, created=False)
    depth = _depth(conn, new)
    for dep in set(new.depends_on):
        check_link(conn, None, dep, board=new.board)
    status, run_after = _first_status(conn, new, now)
    card_id = _insert(conn, new, status=status, depth=depth, run_after=run_after, now=now)
    if card_id is None:  # lost the race for the key: the winner has committed its card
        assert new.key is not None
        existing = card_with_key(conn, new.board, new.key)
        if existing is None:  # …and it was finished since: this add may create the card
            return add(conn, new, now)
        return Added(existing, created=False)
    for dep in sorted(set(new.depends_on)):
        conn.run("INSERT INTO dependency (card_id, depends_on_id) VALUES (:card, :dep)",
                 {"card": card_id, "dep": dep})
    _record_created(conn, card_id, new, status, run_after, now)
    if status is CardStatus.TODO and (ended := ended_dependency(conn, card_id)) is not None:
        # it would wait in todo for a card nobody will finish: blocked on it, naming it
        block_on(conn, card_id, ended[0], f"is {ended[1]}", now, new.created_by)
    return Added(get_card(conn, card_id), created=True)


def _depth(conn: Conn, new: NewCard) -> int:
    """How deep the new card sits below its root: its parent's depth and one."""
    if new.parent_id is None:
        if parse_spec(new.workspace).kind == PARENT:
            raise ValidationError("workspace 'parent' needs a parent card")
        return 0
    parent = get_card(conn, new.parent_id)
    if parent.board != new.board:
        raise ValidationError(f"parent #{parent.id} is on board {parent.board!r}, not "
                              f"{new.board!r}: children stay on their parent's board")
    return parent.depth + 1


def _first_status(conn: Conn, new: NewCard, now: datetime) -> tuple[CardStatus, datetime]:
    """The state a new card starts in, and when it may first be claimed."""
    blocked_by = unfinished_dependencies(conn, new.depends_on)
    status = CardStatus.TODO if blocked_by else CardStatus.READY
    run_after = now
    if new.run_at is not None and new.run_at > now:
        status, run_after = CardStatus.SCHEDULED, new.run_at
    if new.triage:  # its decomposer's card does the work; it waits for the split
        status = CardStatus.TRIAGE
    return status, run_after


def _insert(conn: Conn, new: NewCard, *, status: CardStatus, depth: int, run_after: datetime,
            now: datetime) -> int | None:
    """The new card's id; None when a card with its key was added concurrently."""
    params: dict[str, Any] = {
        "board": new.board, "title": new.title.strip(), "goal": new.goal,
        "context": new.context, "status": status, "priority": new.priority,
        "profile": new.profile, "model": new.model, "toolsets": new.toolsets,
        "parent_id": new.parent_id, "depth": depth, "created_by": new.created_by,
        "max_attempts": new.max_attempts, "timeout_s": new.timeout_s, "now": now,
        "run_after": run_after, "key": new.key, "skills": ",".join(new.skills) or None,
        "command": new.command,
        "workspace": new.workspace, "role": new.role, "review": new.review,
        "max_reviews": new.max_reviews, "subject_id": new.subject_id,
        "on_dependency_failure": new.on_dependency_failure,
    }
    sql = _INSERT_CARD + (_ON_KEY_CONFLICT if new.key is not None else "") + "RETURNING id"
    row = conn.one(sql, params)
    return None if row is None else row[0]


def _record_created(conn: Conn, card_id: int, new: NewCard, status: CardStatus,
                    run_after: datetime, now: datetime) -> None:
    extra: dict[str, Any] = {}
    if status is CardStatus.SCHEDULED:
        extra["scheduled_for"] = run_after.isoformat()
    if new.key is not None:
        extra["key"] = new.key
    if new.review is not None:
        extra["review"] = new.review
    if new.on_dependency_failure is not None:
        extra["on_dependency_failure"] = new.on_dependency_failure
    record_event(
        conn, board=new.board, card_id=card_id, kind="created", actor=new.created_by, at=now,
        to=str(status), depends_on=sorted(set(new.depends_on)), parent_id=new.parent_id,
        **extra,
    )


def card_with_key(conn: Conn, board: str, key: str) -> CardRecord | None:
    """The board's unfinished card holding idempotency key `key`, if any."""
    row = conn.one(_BY_KEY, {"board": board, "key": key})
    return card_from_row(row) if row is not None else None


_GET_CARD = f"{_CARD_SELECT} WHERE id = :id"


def get_card(conn: Conn, card_id: int, *, board: str | None = None) -> CardRecord:
    return run_plan(conn, card_plan(card_id, board=board))


def card_plan(card_id: int, *, board: str | None = None) -> Plan[CardRecord]:
    rows = yield Query(_GET_CARD, {"id": card_id})
    if not rows:
        raise CardNotFound(card_id, board)
    record = card_from_row(rows[0])
    if board is not None and record.board != board:
        raise CardNotFound(card_id, board)
    return record


def cards_by_id(conn: Conn, ids: Iterable[int]) -> list[CardRecord]:
    return run_plan(conn, cards_by_id_plan(ids))


def cards_by_id_plan(ids: Iterable[int]) -> Plan[list[CardRecord]]:
    ids = list(ids)
    if not ids:
        return []
    marks, params = in_list("i", ids)
    rows = yield Query(f"{_CARD_SELECT} WHERE id IN ({marks}) ORDER BY id", params)
    return [card_from_row(row) for row in rows]


card_from_row = row_reader(CardRecord, CARD_COLUMNS)  # a CardRecord from a row of CARD_COLUMNS


def card_detail(conn: Conn, card_id: int, *, board: str | None = None) -> CardDetail:
    return run_plan(conn, card_detail_plan(card_id, board=board))


def card_detail_plan(card_id: int, *, board: str | None = None) -> Plan[CardDetail]:
    """One card with its links, comments, runs and history (`kanban show --json`)."""
    card = yield from card_plan(card_id, board=board)
    key = {"id": card_id}
    dep_ids = (yield Query("SELECT depends_on_id FROM dependency WHERE card_id = :id", key)
               ).column()
    dependent_ids = (yield Query("SELECT card_id FROM dependency WHERE depends_on_id = :id",
                                 key)).column()
    child_ids = (yield Query("SELECT id FROM card WHERE parent_id = :id", key)).column()
    comments: Rows = yield Query("SELECT * FROM comment WHERE card_id = :id ORDER BY id", key)
    runs: Rows = yield Query(RUNS_OF_CARD, key)
    events: Rows = yield Query("SELECT * FROM event WHERE card_id = :id ORDER BY id", key)
    policy = card.on_dependency_failure or (yield Query(
        "SELECT on_dependency_failure FROM board WHERE name = :b", {"b": card.board})).scalar()
    return CardDetail(
        card=card,
        depends_on=tuple((yield from cards_by_id_plan(dep_ids))),
        dependents=tuple((yield from cards_by_id_plan(dependent_ids))),
        children=tuple((yield from cards_by_id_plan(child_ids))),
        comments=tuple(CommentRecord.from_row(with_times(r)) for r in comments.maps()),
        runs=tuple(RunRecord.from_row(with_times(r)) for r in runs.maps()),
        events=tuple(EventRecord.from_row(with_times(r)) for r in events.maps()),
        attachments=tuple((yield from card_attachments_plan(card_id))),
        on_dependency_failure=str(policy or "block"),
    )


def card_attachments(conn: Conn, card_id: int) -> list[AttachmentRecord]:
    return run_plan(conn, card_attachments_plan(card_id))


def card_attachments_plan(card_id: int) -> Plan[list[AttachmentRecord]]:
    rows = yield Query("SELECT id, card_id, name, sha256, size, media_type, added_by, at "
                       "FROM attachment WHERE card_id = :id ORDER BY name", {"id": card_id})
    return [AttachmentRecord.from_row(with_times(r)) for r in rows.maps()]
