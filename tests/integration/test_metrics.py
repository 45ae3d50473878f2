"""The board's metrics on both stores: the usage totals the trigger keeps equal a sum over
every call, and a scrape's families (parsed back by prometheus_client's own parser) say
what the board holds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kanban import claims
from kanban.cards import NewCard
from kanban.metrics import aggregates_plan, read_aggregates, registry_of
from kanban.service import Kanban
from kanban.state.migrations import migrate, statements
from kanban.state.plans import Rows
from kanban.state.store import Database
from tests.support.db import STORES, claim_one, put_card_in
from tests.support.pg import UNDO_CARD_SEARCH

stores = pytest.mark.parametrize("store", STORES, indirect=True)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(db: Database) -> Samples:
    """Every sample of one scrape, keyed by name and sorted labels (via the text format)."""
    text = generate_latest(registry_of(read_aggregates(db))).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def spend(kb: Kanban, card_id: int, calls: Iterator[tuple[str, int, int, float | None]]
          ) -> None:
    claim = claim_one(kb, card_id)
    with kb.db.write() as conn:
        for model, tokens_in, tokens_out, cost in calls:
            claims.record_usage(conn, claim.run_id, card_id, model, input_tokens=tokens_in,
                                output_tokens=tokens_out, cached_tokens=tokens_in // 2,
                                now=kb.clock(), cost=cost)


@stores
def test_usage_totals_equal_the_sum_of_every_call(kb: Kanban) -> None:
    coder = kb.add_card(NewCard("code", profile="coder")).id
    writer = kb.add_card(NewCard("write", profile="writer")).id
    spend(kb, coder, iter([("openai:gpt", 100, 10, 0.5), ("openai:gpt", 40, 4, 0.25),
                           ("local:llama", 7, 3, None)]))
    spend(kb, writer, iter([("openai:gpt", 1, 2, 0.125)]))
    with kb.db.read() as conn:
        kept = conn.all("SELECT board, profile, model, sum(calls), sum(input_tokens), "
                        "sum(output_tokens), sum(cached_tokens), sum(cost), "
                        "sum(unpriced_calls) FROM usage_total GROUP BY board, profile, model "
                        "ORDER BY profile, model")
        summed = conn.all(
            "SELECT c.board, c.profile, u.model, count(*), sum(u.input_tokens), "
            "sum(u.output_tokens), sum(u.cached_tokens), coalesce(sum(u.cost), 0), "
            "count(*) - count(u.cost) FROM usage u JOIN run r ON r.id = u.run_id "
            "JOIN card c ON c.id = r.card_id GROUP BY c.board, c.profile, u.model "
            "ORDER BY c.profile, u.model")
    assert [tuple(row) for row in kept] == [tuple(row) for row in summed]
    assert [tuple(row[2:4]) for row in kept] == [("local:llama", 1), ("openai:gpt", 2),
                                                 ("openai:gpt", 1)]


@stores
def test_migration_18_counts_the_calls_recorded_before_it(kb: Kanban) -> None:
    card = kb.add_card(NewCard("old work", profile="coder")).id
    spend(kb, card, iter([("openai:gpt", 100, 10, 0.5), ("openai:gpt", 1, 1, None)]))
    before = read_aggregates(kb.db).usage
    cards = [c for c in read_aggregates(kb.db).cards if c[3]]
    with kb.db.write() as conn:  # the database as migration 17 left it, calls and all
        if conn.dialect == "postgresql":
            conn.execute("DROP TRIGGER usage_total_insert ON usage")
            conn.execute("DROP FUNCTION usage_total_add()")
        else:
            conn.execute("DROP TRIGGER usage_total_insert")
            for trigger in ("card_wakeup_scheduled_insert", "card_wakeup_scheduled_update"):
                conn.execute(f"DROP TRIGGER {trigger}")  # and undo 21 (PostgreSQL's redoes)
        conn.execute("DROP TABLE usage_total")
        conn.execute("ALTER TABLE card DROP COLUMN traceparent")  # and undo 19, after it
        if conn.dialect == "postgresql":  # and 22's per-statement counters
            for trigger in ("card_count_insert", "card_count_delete"):
                conn.execute(f"DROP TRIGGER {trigger} ON card")
            for statement in UNDO_CARD_SEARCH:  # and 23's card documents
                conn.execute(statement)
        # and 20: card_count as migration 14 made it, by 14's own statements (what it drops
        # is gone already where 22 replaced it)
        sql = resources.files("kanban.state.migrations").joinpath(
            f"0014_quiet_tick.{conn.dialect}.sql").read_text()
        for statement in statements(sql):
            if "card_count" in statement:
                conn.execute(re.sub(r"^DROP (TRIGGER|FUNCTION) ", r"DROP \1 IF EXISTS ",
                                    statement))
        conn.execute("DELETE FROM schema_migration WHERE id IN (18, 19, 20, 21, 22, 23)")
    assert migrate(kb.db) == 6
    assert read_aggregates(kb.db).usage == before
    assert [c for c in read_aggregates(kb.db).cards if c[3]] == cards == [
        ("default", "coder", "running", 1)]
    assert [(u.calls, u.input_tokens, u.unpriced_calls) for u in before] == [(2, 101, 1)]


@stores
def test_a_scrape_says_what_the_board_holds(kb: Kanban) -> None:
    done = kb.add_card(NewCard("finished", profile="writer")).id
    spend(kb, done, iter([("openai:gpt", 100, 10, 0.5), ("local:llama", 7, 3, None)]))
    for status, n in (("ready", 3), ("blocked", 2)):
        for _ in range(n):
            put_card_in(kb, status, profile="coder")
    samples = scrape(kb.db)
    assert sample(samples, "kanban_cards", board="default", profile="coder",
                  status="ready") == 3
    assert sample(samples, "kanban_cards", board="default", profile="coder",
                  status="blocked") == 2
    assert sample(samples, "kanban_cards", board="default", profile="writer",
                  status="running") == 1
    gpt = {"board": "default", "profile": "writer", "model": "openai:gpt"}
    llama = {**gpt, "model": "local:llama"}
    assert sample(samples, "kanban_model_calls_total", **gpt) == 1
    assert sample(samples, "kanban_model_tokens_total", kind="input", **gpt) == 100
    assert sample(samples, "kanban_model_tokens_total", kind="cached", **gpt) == 50
    assert sample(samples, "kanban_model_cost_dollars_total", **gpt) == 0.5
    assert sample(samples, "kanban_model_cost_dollars_total", **llama) == 0  # not a price
    assert sample(samples, "kanban_model_unpriced_calls_total", **llama) == 1
    assert sample(samples, "kanban_cron_delivery_backlog", status="pending") == 0


@stores
def test_the_notification_backlog_counts_only_undelivered_events(kb: Kanban) -> None:
    card = kb.add_card(NewCard("watched")).id
    with kb.db.write() as conn:
        for status in ("pending", "pending", "sending", "delivered", "failed"):
            conn.run(_OUTBOX, _outbox_row(card, status, kb.clock()))
    samples = scrape(kb.db)
    assert sample(samples, "kanban_notify_backlog", board="default", status="pending") == 2
    assert sample(samples, "kanban_notify_backlog", board="default", status="sending") == 1


_OUTBOX = ("INSERT INTO notify_outbox (subscription_id, board, card_id, event, target, "
           "payload, status, attempts, next_attempt_at, created_at, updated_at) VALUES "
           "(1, 'default', :card, 'done', 'file:/dev/null', '{}', :status, 0, :now, :now, "
           ":now)")


def _outbox_row(card: int, status: str, now: Any) -> dict[str, Any]:
    return {"card": card, "status": status, "now": now}


def test_the_backlogs_are_read_through_their_indexes(kb: Kanban) -> None:
    """Delivered history does not slow a scrape: each backlog is found by an index (SQLite's
    plans; test_query_plans explains the scrape on PostgreSQL too)."""
    plan, found = aggregates_plan(), []
    query = next(plan)
    try:
        while True:
            with kb.db.read() as conn:
                found += [row[3] for row in conn.all("EXPLAIN QUERY PLAN " + query.sql)]
            query = plan.send(Rows())
    except StopIteration:
        pass
    assert "SEARCH o USING COVERING INDEX ix_notify_outbox_board (board=? AND status=?)" \
        in found
    assert "SCAN d USING INDEX ix_cron_delivery_due" in found
    assert not [line for line in found if re.match(r"SCAN (card|run|event|message|usage)\b",
                                                   line)]
