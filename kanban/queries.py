"""Read models for the board view and `kanban status`, as plans both stores run.

Each read model is a plan (kanban.state.plans): the CLI runs it on its `Conn`, the web
board on its async connection, so both print the same JSON.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kanban.activity import parse as parse_activity
from kanban.approvals import pending_on_board_plan
from kanban.card_filter import CardFilter, filter_sql
from kanban.cards import CARD_SELECT, card_from_row, require_board, require_board_plan
from kanban.columns import BoardCard, column_plan
from kanban.control import DispatcherInfo, PauseState, live_dispatchers_plan, pause_state_plan
from kanban.records import CardRecord
from kanban.state.plans import Plan, Query, in_list, run_plan
from kanban.state.rows import as_set_time, as_time
from kanban.state.store import Conn
from kanban.states import BOARD_ORDER, CardStatus
from kanban.textsafety import visible


@dataclass(frozen=True)
class BoardSnapshot:
    board: str
    counts: dict[str, int]
    columns: dict[str, list[BoardCard]]
    pause: PauseState
    dispatchers: list[DispatcherInfo] = field(default_factory=list)
    at: datetime | None = None
    cursor: int = 0  # the newest event when read: changes after it come on the live stream
    more: dict[str, str | None] = field(default_factory=dict)  # each column's next page
    approvals: dict[int, list[str]] = field(default_factory=dict)  # card id → pending commands
    shown: tuple[str, ...] = ()  # the columns asked for (none: every column)
    failing: dict[str, int] = field(default_factory=dict)  # notification target → undelivered

    @property
    def statuses(self) -> tuple[str, ...]:
        """The columns to show, in the board's order."""
        return tuple(str(s) for s in BOARD_ORDER if not self.shown or s in self.shown)

    def to_json(self) -> dict[str, object]:
        return {
            "board": self.board,
            "paused": self.pause.paused,
            "paused_globally": self.pause.global_paused,
            "dispatchers": [
                {"id": d.id, "host": d.host, "pid": d.pid,
                 "heartbeat_at": d.heartbeat_at.isoformat()} for d in self.dispatchers
            ],
            "counts": self.counts,
            "columns": {k: [c.to_json() for c in v] for k, v in self.columns.items()
                        if k in self.statuses},
            "cursor": self.cursor,
            "pending_approvals": [{"card_id": card_id, "command": command}
                                  for card_id, commands in self.approvals.items()
                                  for command in commands],
            "failing_notifications": self.failing,
        }


def status_counts(conn: Conn, board: str | None = None) -> dict[str, int]:
    return run_plan(conn, status_counts_plan(board))


def status_counts_plan(board: str | None = None) -> Plan[dict[str, int]]:
    """Unarchived cards per column, from the counts the card triggers keep (migration 14)."""
    if board is None:
        rows = yield Query("SELECT status, sum(n) FROM card_count GROUP BY status")
    else:
        rows = yield Query("SELECT status, sum(n) FROM card_count WHERE board = :board "
                           "GROUP BY status", {"board": board})
    counts = {str(s): 0 for s in BOARD_ORDER}
    counts.update({status: int(n) for status, n in rows})
    return counts


def event_cursor_plan() -> Plan[int]:
    """The id of the newest event (0 on an empty log)."""
    rows = yield Query("SELECT coalesce(max(id), 0) FROM event")
    return int(rows.scalar())


def board_snapshot(conn: Conn, board: str, *, now: datetime, per_column: int = 20,
                   statuses: Sequence[str] = ()) -> BoardSnapshot:
    return run_plan(conn, board_snapshot_plan(board, now=now, per_column=per_column,
                                              statuses=statuses))


def board_snapshot_plan(board: str, *, now: datetime, per_column: int = 20,
                        profile: str | None = None, text: str | None = None,
                        statuses: Sequence[str] = ()) -> Plan[BoardSnapshot]:
    """Counts of every column and its first `per_column` cards (priority, then age).

    Counts are the board's; `profile`, `text` and `statuses` narrow the cards listed.
    """
    cursor = yield from event_cursor_plan()
    yield from require_board_plan(board)
    counts = yield from status_counts_plan(board)
    shown = {str(CardStatus(s)) for s in statuses} or {str(s) for s in BOARD_ORDER}
    columns: dict[str, list[BoardCard]] = {}
    more: dict[str, str | None] = {}
    for status in BOARD_ORDER:
        columns[str(status)], more[str(status)] = [], None
        if counts[status] and status in shown:
            page = yield from column_plan(board, status, limit=per_column, profile=profile,
                                          text=text)
            columns[str(status)], more[str(status)] = page.cards, page.next
    approvals: dict[int, list[str]] = {}
    if counts[CardStatus.BLOCKED]:  # only blocked cards wait on an approval
        for item in (yield from pending_on_board_plan(board)):
            approvals.setdefault(item.card_id, []).append(item.command)
    pause = yield from pause_state_plan(board)
    dispatchers = yield from live_dispatchers_plan(now)
    failing = yield Query(_FAILING_NOTIFICATIONS, {"board": board})
    return BoardSnapshot(board, counts, columns, pause, dispatchers, now, cursor, more,
                         approvals, tuple(sorted({str(CardStatus(s)) for s in statuses})),
                         {str(target): int(n) for target, n in failing})


# Targets whose notifications failed and are not delivered yet (the board header says so).
_FAILING_NOTIFICATIONS = (
    "SELECT target, count(*) FROM notify_outbox WHERE board = :board "
    "AND status IN ('pending', 'sending', 'failed') AND last_error IS NOT NULL "
    "GROUP BY target ORDER BY target")


@dataclass(frozen=True)
class LiveWorker:
    """A running card's worker as recorded on its run."""

    card_id: int
    board: str
    title: str
    attempt: int
    pid: int | None
    host: str | None
    started_at: datetime
    heartbeat_at: datetime | None
    progress: str | None
    activity: str | None = None  # JSON, see kanban.activity
    retry_base: int = 0  # claims before the card's current budget (kanban.attempts)

    @property
    def spent(self) -> int:
        """The attempt of its budget this run is, as `kanban show` counts (`attempt` is the
        card's claim count)."""
        return self.attempt - self.retry_base

    def to_json(self, now: datetime) -> dict[str, object]:
        return {
            "card_id": self.card_id, "board": self.board, "title": self.title,
            "attempt": self.attempt, "spent": self.spent, "pid": self.pid, "host": self.host,
            "started_at": self.started_at.isoformat(),
            "runtime_s": round((now - self.started_at).total_seconds(), 1),
            "heartbeat_age_s": (round((now - self.heartbeat_at).total_seconds(), 1)
                                if self.heartbeat_at else None),
            "progress": self.progress,
            "activity": parse_activity(self.activity) or None,
        }


def live_workers(conn: Conn, *, board: str | None = None) -> list[LiveWorker]:
    return run_plan(conn, live_workers_plan(board=board))


def live_workers_plan(*, board: str | None = None) -> Plan[list[LiveWorker]]:
    sql = ("SELECT c.id, c.board, c.title, c.attempt, r.pid, r.host, r.started_at, "
           "r.heartbeat_at, r.progress, r.activity, c.retry_base FROM card c JOIN run r "
           "ON r.card_id = c.id AND "
           "r.claim_token = c.claim_token WHERE c.status = 'running'")
    if board is not None:
        sql += " AND c.board = :board"
    rows = yield Query(sql + " ORDER BY c.id", {"board": board})
    return [LiveWorker(card_id=row[0], board=row[1], title=row[2], attempt=row[3], pid=row[4],
                       host=row[5], started_at=as_set_time(row[6]),
                       heartbeat_at=as_time(row[7]), progress=row[8], activity=row[9],
                       retry_base=row[10])
            for row in rows]


_SUBTREE_COST = """
WITH RECURSIVE tree(id) AS (
    SELECT id FROM card WHERE id = :id
    UNION ALL SELECT c.id FROM card c JOIN tree t ON c.parent_id = t.id
)
SELECT coalesce(sum(cost), 0) FROM card WHERE id IN (SELECT id FROM tree)
"""


def subtree_cost(conn: Conn, card_id: int) -> float:
    """Dollars spent on a card and every card it delegated, at any depth."""
    return run_plan(conn, subtree_cost_plan(card_id))


def subtree_cost_plan(card_id: int) -> Plan[float]:
    rows = yield Query(_SUBTREE_COST, {"id": card_id})
    return float(rows.scalar() or 0.0)


# -- `kanban list`: a page of the newest cards, or every card streamed ------------------------
# (CardFilter lives in kanban.card_filter: the web board's filters use it too)


@dataclass(frozen=True)
class CardPage:
    cards: list[CardRecord]  # newest first
    total: int  # every card the filter matches

    @property
    def more(self) -> int:
        return self.total - len(self.cards)


def card_page(conn: Conn, flt: CardFilter, limit: int) -> CardPage:
    return run_plan(conn, card_page_plan(flt, limit))


def card_page_plan(flt: CardFilter, limit: int) -> Plan[CardPage]:
    """The newest `limit` cards the filter matches, and how many it matches in all
    (`kanban list --json`: {cards, total, more})."""
    if flt.board is not None:
        yield from require_board_plan(flt.board)
    terms, params = filter_sql(flt, prefix="")
    where = f" WHERE {' AND '.join(terms)}" if terms else ""
    rows = yield Query(f"{CARD_SELECT}{where} ORDER BY id DESC LIMIT :limit",
                       {**params, "limit": limit})
    cards = [card_from_row(row) for row in rows]
    total = len(cards)
    if total == limit and _counted(flt):
        counts = yield from status_counts_plan(flt.board)
        wanted = {str(CardStatus(s)) for s in flt.statuses} or set(counts)
        total = sum(n for status, n in counts.items() if status in wanted)
    elif total == limit:
        total = int((yield Query(f"SELECT count(*) FROM card{where}", params)).scalar())
    return CardPage(cards, total)


def _counted(flt: CardFilter) -> bool:
    """Whether card_count (a board's unarchived cards per state) answers the filter's total
    without counting every matching card."""
    return (flt.board is not None and not flt.include_archived and not flt.profile
            and not (flt.text and flt.text.strip()) and flt.since is None and flt.before is None)


def iter_cards(conn: Conn, flt: CardFilter, batch: int = 500) -> Iterator[CardRecord]:
    """Every card the filter matches, newest first, fetched in batches (constant memory)."""
    if flt.board is not None:
        require_board(conn, flt.board)
    terms, params = filter_sql(flt, prefix="")
    where = f" WHERE {' AND '.join(terms)}" if terms else ""
    cursor = conn.execute(f"{CARD_SELECT}{where} ORDER BY id DESC", params)
    while rows := cursor.fetchmany(batch):
        yield from (card_from_row(row) for row in rows)


@dataclass(frozen=True)
class RunResult:
    """How a run ended, for the dispatcher's log line."""

    card_status: str
    outcome: str | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    waits_for: str | None = None  # a blocked card: what a person must decide, and how

    def with_waits_for(self, text: str | None) -> RunResult:
        return RunResult(self.card_status, self.outcome, self.error, self.input_tokens,
                         self.output_tokens, self.cached_tokens, text)


WAITS_FOR_CHARS = 500  # of a block's reason or an approval's commands, in one log line


def run_result(conn: Conn, run_id: int) -> RunResult | None:
    row = conn.one("SELECT c.status, r.outcome, r.error, r.input_tokens, r.output_tokens, "
                   "r.cached_tokens, c.id, c.error FROM run r JOIN card c ON c.id = r.card_id "
                   "WHERE r.id = :id", {"id": run_id})
    if row is None:
        return None
    result = RunResult(*row[:6])
    if result.card_status != CardStatus.BLOCKED:
        return result
    card_id, reason = row[6], row[7] or ""
    commands = conn.column("SELECT command FROM approval WHERE card_id = :id AND "
                           "decision = 'pending' ORDER BY id", {"id": card_id})
    if commands:
        said = (f"waits for approval of `{'; '.join(commands)}`"[:WAITS_FOR_CHARS]
                + f" (kanban approve {card_id} / kanban deny {card_id})")
    else:
        said = (f"waits for a person: {reason}"[:WAITS_FOR_CHARS]
                + f" (kanban unblock {card_id} --note ...)")
    return result.with_waits_for(visible(said, one_line=True))


def card_outcomes(conn: Conn, card_ids: Collection[int]) -> list[tuple[str, str | None]]:
    """(status, error) of each of these cards (say, those a dispatcher claimed)."""
    if not card_ids:
        return []
    marks, ids = in_list("c", sorted(card_ids))
    return [(status, error) for status, error in conn.all(
        f"SELECT status, error FROM card WHERE id IN ({marks})", ids)]
