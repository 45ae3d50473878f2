"""What changed on the boards since a given event: the read model of the live board.

Every state change writes an event in its transaction, so "the cards named by events
after N, plus the cards running now" is exactly what a viewer that saw event N lacks
(heartbeats and progress notes touch only running cards). One read answers it for all
viewers of all boards at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kanban.columns import BoardCard, board_cards_plan
from kanban.control import DispatcherInfo, live_dispatchers_plan
from kanban.queries import BOARD_ORDER, event_cursor_plan
from kanban.state.plans import Plan, Query, in_list

MAX_REPLAY = 2_000  # events; a viewer further behind than this reloads its board


@dataclass(frozen=True)
class BoardHeader:
    """The board's header line: pause flags and live dispatchers."""

    paused_globally: bool
    board_paused: bool
    dispatchers: tuple[DispatcherInfo, ...]

    @property
    def paused(self) -> bool:
        return self.paused_globally or self.board_paused

    def to_json(self) -> dict[str, Any]:
        return {"paused": self.paused, "paused_globally": self.paused_globally,
                "board_paused": self.board_paused,
                "dispatchers": [{"id": d.id, "host": d.host, "pid": d.pid,
                                 "heartbeat_at": d.heartbeat_at.isoformat()}
                                for d in self.dispatchers]}


@dataclass(frozen=True)
class BoardChange:
    """One board's part of a change: its changed cards, and its counts if they moved."""

    cards: list[BoardCard] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)  # archived: off the board
    counts: dict[str, int] | None = None
    approvals: dict[int, list[str]] = field(default_factory=dict)  # card id → pending commands


@dataclass(frozen=True)
class Changes:
    cursor: int  # the newest event this read includes
    boards: dict[str, BoardChange]
    headers: dict[str, BoardHeader]  # every board's, changed or not
    running: frozenset[int]  # cards running now: the next read looks at them again
    reset: bool = False  # too far behind (or ahead): reload instead

    def for_board(self, board: str) -> BoardChange:
        return self.boards.get(board) or BoardChange()


def changes_plan(after: int, *, now: datetime, running: frozenset[int] = frozenset(),
                 limit: int = MAX_REPLAY) -> Plan[Changes]:
    """The cards and counts that changed after event `after` (see the module docstring)."""
    events = yield Query("SELECT id, board, card_id FROM event WHERE id > :after ORDER BY id "
                         "LIMIT :n", {"after": after, "n": limit + 1})
    newest = yield from event_cursor_plan()
    if len(events) > limit or newest < after:
        return Changes(newest, {}, {}, frozenset(), reset=True)
    cursor = events[-1][0] if events else after
    # in id order: the running cards' own partial index answers it
    running_now = frozenset((yield Query("SELECT id FROM card WHERE status = 'running' "
                                         "ORDER BY id")).column())
    ids = sorted({card_id for _, _, card_id in events if card_id is not None}
                 | running_now | running)
    touched = {board for _, board, _ in events if board != "*"}
    boards: dict[str, BoardChange] = {}
    for board, archived, card in (yield from board_cards_plan(ids)):
        change = boards.setdefault(board, BoardChange())
        if archived:
            change.removed.append(card.id)
        else:
            change.cards.append(card)
        if card.id not in running or card.id not in running_now:
            touched.add(board)  # started or stopped running: its counts go out again
    for board, counts in (yield from _counts_plan(sorted(touched))).items():
        old = boards.get(board) or BoardChange()
        boards[board] = BoardChange(old.cards, old.removed, counts, old.approvals)
    blocked = [c.id for part in boards.values() for c in part.cards if c.status == "blocked"]
    if blocked:
        marks, params = in_list("a", blocked)
        waiting = yield Query("SELECT a.card_id, a.command, c.board FROM approval a JOIN card c "
                              f"ON c.id = a.card_id WHERE a.decision = 'pending' AND a.card_id "
                              f"IN ({marks}) ORDER BY a.id", params)
        for card_id, command, board in waiting:
            boards[board].approvals.setdefault(card_id, []).append(command)
    headers = yield from headers_plan(now)
    return Changes(cursor, boards, headers, running_now)


def _counts_plan(boards: list[str]) -> Plan[dict[str, dict[str, int]]]:
    if not boards:
        return {}
    marks, params = in_list("b", boards)
    rows = yield Query(f"SELECT board, status, sum(n) FROM card_count WHERE board IN ({marks}) "
                       "GROUP BY board, status", params)  # summed over profiles and shards
    counts = {board: {str(s): 0 for s in BOARD_ORDER} for board in boards}
    for board, status, n in rows:
        counts[board][status] = n
    return counts


def headers_plan(now: datetime) -> Plan[dict[str, BoardHeader]]:
    """Every board's pause flags and the live dispatchers."""
    flag = yield Query("SELECT value FROM setting WHERE key = 'spawn_paused'")
    paused_globally = flag.scalar() == "1"
    boards = yield Query("SELECT name, paused FROM board ORDER BY name")
    dispatchers = tuple((yield from live_dispatchers_plan(now)))
    return {name: BoardHeader(paused_globally, bool(paused), dispatchers)
            for name, paused in boards}


def fingerprint_plan() -> Plan[tuple[Any, ...]]:
    """Moves whenever a board viewer could see something new: for stores with no cheap
    change signal (PostgreSQL until LISTEN/NOTIFY), polled."""
    rows = yield Query(
        "SELECT (SELECT max(id) FROM event), "
        "(SELECT max(heartbeat_at) FROM run WHERE finished_at IS NULL), "
        "(SELECT max(heartbeat_at) FROM dispatcher WHERE stopped_at IS NULL)")
    return tuple(rows[0])
