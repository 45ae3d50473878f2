"""Creating and reading cards and boards."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, insert, select

from kanban import validation as v
from kanban.dependencies import check_link, unfinished_dependencies
from kanban.errors import BoardNotFound, CardNotFound, ValidationError
from kanban.events import record_event
from kanban.records import CardDetail, CardRecord, CommentRecord, EventRecord, RunRecord
from kanban.states import CardStatus
from state import rawsql
from state.models import Board, Card, Comment, Dependency, Event, Run

card_t = Card.__table__
board_t = Board.__table__
dep_t = Dependency.__table__
run_t = Run.__table__
comment_t = Comment.__table__
event_t = Event.__table__


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

    def validated(self) -> NewCard:
        v.title(self.title)
        v.text(self.goal, "goal", v.MAX_GOAL)
        v.text(self.context, "context", v.MAX_CONTEXT)
        v.number(self.priority, "priority", v.PRIORITY_RANGE)
        v.number(self.max_attempts, "max attempts", v.MAX_ATTEMPTS_RANGE)
        if self.timeout_s is not None:
            v.number(self.timeout_s, "timeout", v.TIMEOUT_RANGE)
        if not v.BOARD_NAME.match(self.profile):
            raise ValidationError(f"invalid profile name {self.profile!r}")
        return self


def require_board(conn: Connection, board: str) -> None:
    if rawsql.fetchone(conn, "SELECT name FROM board WHERE name = :b", {"b": board}) is None:
        raise BoardNotFound(board)


def create_board(conn: Connection, name: str, now: datetime) -> bool:
    """Create a board; False if it already existed."""
    v.board_name(name)
    if conn.execute(select(board_t.c.name).where(board_t.c.name == name)).first():
        return False
    conn.execute(insert(board_t), {"name": name, "paused": False, "created_at": now})
    record_event(conn, board=name, kind="board_created", actor="user", at=now)
    return True


def list_boards(conn: Connection) -> list[dict[str, object]]:
    counts = (
        select(card_t.c.board, func.count().label("cards"))
        .where(card_t.c.archived_at.is_(None))
        .group_by(card_t.c.board)
        .subquery()
    )
    rows = conn.execute(
        select(board_t, func.coalesce(counts.c.cards, 0).label("cards"))
        .outerjoin(counts, counts.c.board == board_t.c.name)
        .order_by(board_t.c.name)
    ).mappings()
    return [{"name": r["name"], "paused": bool(r["paused"]), "cards": r["cards"]} for r in rows]


def add_card(conn: Connection, new: NewCard, now: datetime) -> CardRecord:
    new = new.validated()
    require_board(conn, new.board)
    depth = 0
    if new.parent_id is not None:
        parent = get_card(conn, new.parent_id)
        if parent.board != new.board:
            raise ValidationError(f"parent #{parent.id} is on board {parent.board!r}, not "
                                  f"{new.board!r}: children stay on their parent's board")
        depth = parent.depth + 1
    for dep in set(new.depends_on):
        check_link(conn, None, dep, board=new.board)
    blocked_by = unfinished_dependencies(conn, new.depends_on)
    status = CardStatus.TODO if blocked_by else CardStatus.READY
    card_id = conn.execute(
        insert(card_t).returning(card_t.c.id),
        {
            "board": new.board, "title": new.title.strip(), "goal": new.goal,
            "context": new.context, "status": status, "priority": new.priority,
            "profile": new.profile, "model": new.model, "toolsets": new.toolsets,
            "parent_id": new.parent_id, "depth": depth, "created_by": new.created_by,
            "attempt": 0, "max_attempts": new.max_attempts, "retry_base": 0,
            "timeout_s": new.timeout_s,
            "run_after": now, "created_at": now, "updated_at": now,
            "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0,
        },
    ).scalar_one()
    for dep in sorted(set(new.depends_on)):
        conn.execute(insert(dep_t), {"card_id": card_id, "depends_on_id": dep})
    record_event(
        conn, board=new.board, card_id=card_id, kind="created", actor=new.created_by, at=now,
        to=str(status), depends_on=sorted(set(new.depends_on)), parent_id=new.parent_id,
    )
    return get_card(conn, card_id)


_CARD_COLUMNS = tuple(column.name for column in card_t.columns)
_GET_CARD = f"SELECT {', '.join(_CARD_COLUMNS)} FROM card WHERE id = :id"


def get_card(conn: Connection, card_id: int, *, board: str | None = None) -> CardRecord:
    row = rawsql.fetchone(conn, _GET_CARD, {"id": card_id})
    if row is None:
        raise CardNotFound(card_id, board)
    record = CardRecord.from_row(rawsql.row_dict(_CARD_COLUMNS, row))
    if board is not None and record.board != board:
        raise CardNotFound(card_id, board)
    return record


def cards_by_id(conn: Connection, ids: Iterable[int]) -> list[CardRecord]:
    ids = list(ids)
    if not ids:
        return []
    rows = conn.execute(select(card_t).where(card_t.c.id.in_(ids)).order_by(card_t.c.id))
    return [CardRecord.from_row(r) for r in rows.mappings()]


def list_cards(
    conn: Connection,
    *,
    board: str | None = None,
    statuses: Sequence[str] = (),
    include_archived: bool = False,
    limit: int | None = None,
) -> list[CardRecord]:
    query = select(card_t).order_by(card_t.c.id)
    if board is not None:
        require_board(conn, board)
        query = query.where(card_t.c.board == board)
    if statuses:
        query = query.where(card_t.c.status.in_([CardStatus(s) for s in statuses]))
    if not include_archived:
        query = query.where(card_t.c.archived_at.is_(None))
    if limit is not None:
        query = query.limit(limit)
    return [CardRecord.from_row(r) for r in conn.execute(query).mappings()]


def card_detail(conn: Connection, card_id: int, *, board: str | None = None) -> CardDetail:
    card = get_card(conn, card_id, board=board)
    dep_ids = select(dep_t.c.depends_on_id).where(dep_t.c.card_id == card_id)
    dependent_ids = select(dep_t.c.card_id).where(dep_t.c.depends_on_id == card_id)
    child_ids = select(card_t.c.id).where(card_t.c.parent_id == card_id)
    comments = conn.execute(
        select(comment_t).where(comment_t.c.card_id == card_id).order_by(comment_t.c.id)
    ).mappings()
    runs = conn.execute(
        select(run_t).where(run_t.c.card_id == card_id).order_by(run_t.c.id)
    ).mappings()
    events = conn.execute(
        select(event_t).where(event_t.c.card_id == card_id).order_by(event_t.c.id)
    ).mappings()
    return CardDetail(
        card=card,
        depends_on=tuple(cards_by_id(conn, conn.execute(dep_ids).scalars())),
        dependents=tuple(cards_by_id(conn, conn.execute(dependent_ids).scalars())),
        children=tuple(cards_by_id(conn, conn.execute(child_ids).scalars())),
        comments=tuple(CommentRecord.from_row(r) for r in comments),
        runs=tuple(RunRecord.from_row(r) for r in runs),
        events=tuple(EventRecord.from_row(r) for r in events),
    )
