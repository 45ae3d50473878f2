"""Which cards a list shows (`kanban list` options, the web board's filters) and the SQL
that selects them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from kanban import validation as v
from kanban.cards import CARD_SELECT, card_from_row, require_board_plan
from kanban.records import CardRecord
from kanban.state.plans import Plan, Query, in_list, run_plan
from kanban.state.store import Conn
from kanban.states import CardStatus


@dataclass(frozen=True)
class CardFilter:
    """Which cards a list shows: `kanban list` options and the web board's filters."""

    board: str | None = None
    statuses: Sequence[str] = ()
    include_archived: bool = False
    since: datetime | None = None  # created at or after
    profile: str | None = None
    text: str | None = None  # in the title, any case; `#12` or `12` also matches card 12
    before: int | None = None  # ids below this one (the next page of a newest-first list)


def list_cards(
    conn: Conn,
    *,
    board: str | None = None,
    statuses: Sequence[str] = (),
    include_archived: bool = False,
    limit: int | None = None,
) -> list[CardRecord]:
    flt = CardFilter(board=board, statuses=statuses, include_archived=include_archived)
    return run_plan(conn, list_cards_plan(flt, limit=limit))


def list_cards_plan(flt: CardFilter, *, limit: int | None = None) -> Plan[list[CardRecord]]:
    """Cards oldest first (`kanban list --json` shape: CardRecord.to_json)."""
    if flt.board is not None:
        yield from require_board_plan(flt.board)
    where, params = filter_sql(flt, prefix="")
    sql = CARD_SELECT + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id"
    if limit is not None:
        sql += " LIMIT :limit"
        params["limit"] = limit
    rows = yield Query(sql, params)
    return [card_from_row(row) for row in rows]


def filter_sql(flt: CardFilter, *, prefix: str = "c.") -> tuple[list[str], dict[str, object]]:
    """WHERE terms and parameters for a CardFilter over `card` (aliased by `prefix`)."""
    where: list[str] = []
    params: dict[str, object] = {}
    if flt.board is not None:
        where.append(f"{prefix}board = :board")
        params["board"] = flt.board
    if flt.statuses:
        marks, names = in_list("s", [str(CardStatus(s)) for s in flt.statuses])
        where.append(f"{prefix}status IN ({marks})")
        params.update(names)
    if not flt.include_archived:
        where.append(f"{prefix}archived_at IS NULL")
    if flt.profile:
        where.append(f"{prefix}profile = :profile")
        params["profile"] = flt.profile
    if flt.text and flt.text.strip():
        text = flt.text.strip()
        escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        # the database folds case on both sides, so SQLite and PostgreSQL each agree
        term = f"lower({prefix}title) LIKE lower(:text) ESCAPE '\\'"
        params["text"] = f"%{escaped}%"
        number = text.removeprefix("#")
        if number.isascii() and number.isdigit() and int(number) <= v.MAX_ID:
            term = f"({term} OR {prefix}id = :text_id)"
            params["text_id"] = int(number)
        where.append(term)
    if flt.since is not None:
        where.append(f"{prefix}created_at >= :since")
        params["since"] = flt.since
    if flt.before is not None:
        where.append(f"{prefix}id < :before")
        params["before"] = flt.before
    return where, params
