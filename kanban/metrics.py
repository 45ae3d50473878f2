"""The board's Prometheus metrics: read at scrape time from counters the database keeps.

Nothing here counts cards, runs or model calls: `card_count` (migration 14) holds the cards
per board, profile and state, `usage_total` (migration 18) the calls, tokens and dollars
per board, profile and model, both kept by triggers as rows change; the outboxes' backlog
is a walk of their partial indexes of undelivered rows. A scrape costs the same on a board
of a hundred cards or a million. `kanban web` serves these on /metrics; `kanban dispatch
--metrics-port` adds its own process's counters (kanban.dispatcher.metrics).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kanban.state.plans import Plan, Query, run_plan
from kanban.state.store import Database

BACKLOG = ("pending", "sending")  # undelivered: waiting for its time, or being sent now


@dataclass(frozen=True)
class UsageTotal:
    board: str
    profile: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float
    unpriced_calls: int


@dataclass(frozen=True)
class Aggregates:
    """What one scrape reads: a few rows whatever the board's size."""

    cards: tuple[tuple[str, str, str, int], ...]  # board, profile, status, cards
    usage: tuple[UsageTotal, ...]
    notify_backlog: tuple[tuple[str, str, int], ...]  # board, status, events
    cron_backlog: tuple[tuple[str, int], ...]  # status, deliveries
    boards: tuple[str, ...]


def aggregates_plan() -> Plan[Aggregates]:
    """The scrape's reads, for the sync store (the dispatcher) and the async one (web)."""
    cards = yield Query("SELECT cc.board, cc.profile, cc.status, sum(cc.n) FROM card_count cc "
                        "GROUP BY cc.board, cc.profile, cc.status "
                        "ORDER BY cc.board, cc.profile, cc.status")
    usage = yield Query(
        "SELECT ut.board, ut.profile, ut.model, sum(ut.calls), sum(ut.input_tokens), "
        "sum(ut.output_tokens), sum(ut.cached_tokens), sum(ut.cost), sum(ut.unpriced_calls) "
        "FROM usage_total ut GROUP BY ut.board, ut.profile, ut.model "
        "ORDER BY ut.board, ut.profile, ut.model")
    # A seek per board and status in the outbox's (board, status) index, and a walk of the
    # cron deliveries' partial index of undelivered rows: both as long as the backlog.
    notify = yield Query("SELECT b.name, o.status, count(*) FROM board b JOIN notify_outbox o "
                         "ON o.board = b.name AND o.status IN ('pending', 'sending') "
                         "GROUP BY b.name, o.status")
    cron = yield Query("SELECT d.status, count(*) FROM cron_delivery d "
                       "WHERE d.status IN ('pending', 'sending') GROUP BY d.status")
    boards = yield Query("SELECT b.name FROM board b ORDER BY b.name")
    return Aggregates(
        cards=tuple((str(b), str(p), str(s), int(n)) for b, p, s, n in cards),
        usage=tuple(UsageTotal(str(r[0]), str(r[1]), str(r[2]), int(r[3]), int(r[4]),
                               int(r[5]), int(r[6]), float(r[7]), int(r[8])) for r in usage),
        notify_backlog=tuple((str(b), str(s), int(n)) for b, s, n in notify),
        cron_backlog=tuple((str(s), int(n)) for s, n in cron),
        boards=tuple(str(name) for (name,) in boards))


def read_aggregates(db: Database) -> Aggregates:
    with db.read() as conn:
        return run_plan(conn, aggregates_plan())


def families(agg: Aggregates) -> list[Metric]:
    """The metric families of one read (label values are escaped when exposed)."""
    cards = GaugeMetricFamily("kanban_cards", "Unarchived cards by board, profile and state.",
                              labels=["board", "profile", "status"])
    for board, profile, status, n in agg.cards:
        cards.add_metric([board, profile, status], n)
    return [cards, *_usage_families(agg.usage), *_backlog_families(agg)]


def _usage_families(rows: Iterable[UsageTotal]) -> list[Metric]:
    labels = ["board", "profile", "model"]
    calls = CounterMetricFamily("kanban_model_calls", "Model calls recorded.", labels=labels)
    tokens = CounterMetricFamily("kanban_model_tokens", "Model tokens by kind (input, output, "
                                 "cached).", labels=[*labels, "kind"])
    cost = CounterMetricFamily("kanban_model_cost_dollars", "Dollars spent on model calls of "
                               "a known price.", labels=labels)
    unpriced = CounterMetricFamily("kanban_model_unpriced_calls", "Model calls whose price "
                                   "was unknown (not in the cost).", labels=labels)
    for u in rows:
        key = [u.board, u.profile, u.model]
        calls.add_metric(key, u.calls)
        for kind, n in (("input", u.input_tokens), ("output", u.output_tokens),
                        ("cached", u.cached_tokens)):
            tokens.add_metric([*key, kind], n)
        cost.add_metric(key, u.cost)
        unpriced.add_metric(key, u.unpriced_calls)
    return [calls, tokens, cost, unpriced]


def _backlog_families(agg: Aggregates) -> list[Metric]:
    notify = GaugeMetricFamily("kanban_notify_backlog", "Card events not yet delivered to "
                               "their notification target, by board and status.",
                               labels=["board", "status"])
    found = {(board, status): n for board, status, n in agg.notify_backlog}
    for board in sorted({*agg.boards, *(b for b, _ in found)}):
        for status in BACKLOG:  # a drained backlog reads 0, it does not vanish
            notify.add_metric([board, status], found.get((board, status), 0))
    cron = GaugeMetricFamily("kanban_cron_delivery_backlog", "Cron results not yet delivered "
                             "to their target, by status.", labels=["status"])
    waiting = dict(agg.cron_backlog)
    for status in BACKLOG:
        cron.add_metric([status], waiting.get(status, 0))
    return [notify, cron]


class BoardCollector(Collector):
    """Reads the aggregates on each scrape (the dispatcher's endpoint)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def collect(self) -> Iterator[Metric]:
        yield from families(read_aggregates(self.db))

    def describe(self) -> Iterator[Metric]:
        return iter(())  # registering must not read the database


class ReadCollector(Collector):
    """Families of aggregates already read (the web board reads them asynchronously)."""

    def __init__(self, agg: Aggregates) -> None:
        self.agg = agg

    def collect(self) -> Iterator[Metric]:
        yield from families(self.agg)


def registry_of(agg: Aggregates) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ReadCollector(agg))
    return registry
