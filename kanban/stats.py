"""`kanban stats`: how much there is, how fast it moves, how often it fails, what it costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kanban.cards import require_board
from kanban.queries import BOARD_ORDER
from kanban.state.rows import as_time
from kanban.state.store import Conn

WINDOWS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}


@dataclass(frozen=True)
class Spend:
    """Tokens and dollars of model calls; `unpriced` calls had no known price."""

    tokens: dict[str, int]
    cost: float
    unpriced: int

    def to_json(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "cost": round(self.cost, 6),
                "unpriced_calls": self.unpriced}


@dataclass(frozen=True)
class Window:
    """Cards finished, and tokens spent, in the last hour or day."""

    done: int
    failed: int
    cancelled: int
    spend: Spend

    @property
    def failure_rate(self) -> float | None:
        ended = self.done + self.failed
        return self.failed / ended if ended else None

    def to_json(self) -> dict[str, Any]:
        rate = self.failure_rate
        return {"done": self.done, "failed": self.failed, "cancelled": self.cancelled,
                "failure_rate": round(rate, 4) if rate is not None else None,
                **self.spend.to_json()}


@dataclass(frozen=True)
class Stats:
    board: str | None
    at: datetime
    by_state: dict[str, int]
    by_profile: dict[str, dict[str, int]]
    by_board: dict[str, dict[str, int]]
    oldest_ready_at: datetime | None
    windows: dict[str, Window]
    spend: Spend
    by_model: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def oldest_ready_age_s(self) -> float | None:
        if self.oldest_ready_at is None:
            return None
        return max(0.0, (self.at - self.oldest_ready_at).total_seconds())

    def to_json(self) -> dict[str, Any]:
        age = self.oldest_ready_age_s
        return {
            "board": self.board, "at": self.at.isoformat(), "by_state": self.by_state,
            "total": sum(self.by_state.values()), "by_profile": self.by_profile,
            "by_board": self.by_board,
            "oldest_ready_age_s": round(age, 1) if age is not None else None,
            "last": {name: w.to_json() for name, w in self.windows.items()},
            **self.spend.to_json(), "by_model": self.by_model,
        }


def stats(conn: Conn, now: datetime, *, board: str | None = None) -> Stats:
    if board is not None:
        require_board(conn, board)
    scope = " AND c.board = :board" if board is not None else ""
    params = {"board": board, "now": now}
    # the counters the card triggers keep (migration 14), not a count of every card
    grouped = conn.all("SELECT c.board, c.profile, c.status, sum(c.n) FROM card_count c "
                       f"WHERE 1 = 1{scope} GROUP BY c.board, c.profile, c.status "
                       "HAVING sum(c.n) > 0", params)
    by_state = {str(s): 0 for s in BOARD_ORDER}
    by_profile: dict[str, dict[str, int]] = defaultdict(dict)
    by_board: dict[str, dict[str, int]] = defaultdict(dict)
    for card_board, profile, status, n in grouped:
        by_state[status] = by_state.get(status, 0) + n
        by_profile[profile][status] = by_profile[profile].get(status, 0) + n
        by_board[card_board][status] = by_board[card_board].get(status, 0) + n
    oldest = conn.scalar("SELECT min(c.run_after) FROM card c WHERE c.status = 'ready' "
                         f"AND c.run_after <= :now{scope}", params)
    windows = {name: _window(conn, now - span, scope, params) for name, span in WINDOWS.items()}
    return Stats(board, now, by_state, dict(by_profile), dict(by_board), as_time(oldest),
                 windows, _spend(conn, None, scope, params), _by_model(conn, scope, params))


def _window(conn: Conn, since: datetime, scope: str, params: dict[str, Any]) -> Window:
    ended = dict(conn.all("SELECT c.status, count(*) FROM card c WHERE c.finished_at >= "
                          ":since AND c.status IN ('done', 'failed', 'cancelled')"
                          f"{scope} GROUP BY c.status", {**params, "since": since}))
    return Window(ended.get("done", 0), ended.get("failed", 0), ended.get("cancelled", 0),
                  _spend(conn, since, scope, params))


# usage.cost is NULL where the model's price is unknown: counted apart, never as zero.
_SPEND = ("SELECT coalesce(sum(u.input_tokens), 0), coalesce(sum(u.output_tokens), 0), "
          "coalesce(sum(u.cached_tokens), 0), coalesce(sum(u.cost), 0), "
          "count(*) - count(u.cost) FROM usage u JOIN run r ON r.id = u.run_id "
          "JOIN card c ON c.id = r.card_id WHERE 1 = 1{since}{scope}")


def _spend(conn: Conn, since: datetime | None, scope: str, params: dict[str, Any]) -> Spend:
    sql = _SPEND.format(since=" AND u.at >= :since" if since is not None else "", scope=scope)
    row = conn.one(sql, {**params, "since": since})
    return Spend({"input": int(row[0]), "output": int(row[1]), "cached": int(row[2])},
                 float(row[3]), int(row[4]))


def _by_model(conn: Conn, scope: str, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rows = conn.all("SELECT u.model, count(*), sum(u.input_tokens), sum(u.output_tokens), "
                    "sum(u.cached_tokens), coalesce(sum(u.cost), 0), count(*) - count(u.cost) "
                    "FROM usage u JOIN run r ON r.id = u.run_id JOIN card c ON c.id = r.card_id "
                    f"WHERE 1 = 1{scope} GROUP BY u.model ORDER BY u.model", params)
    return {row[0]: {"calls": int(row[1]), "input": int(row[2]), "output": int(row[3]),
                     "cached": int(row[4]), "cost": round(float(row[5]), 6),
                     "unpriced_calls": int(row[6])} for row in rows}
