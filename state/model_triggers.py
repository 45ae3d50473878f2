"""What the models cannot declare: SQLite's full-text tables with the triggers that keep them
current (migration 5), PostgreSQL's wake-up notifications (migration 7), the column-count
triggers (migration 14; 9 had the first ones), SQLite's wake-up triggers (migration 15,
scheduled cards in 21), the usage totals' trigger (migration 18), the counters over shards
(migration 20), PostgreSQL's per-statement counters (migration 22) and its card documents
(migration 23: a table of PostgreSQL's only, with its index and triggers). Read from those
frozen migrations, so each statement is written once."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

from sqlalchemy import DDL, MetaData, event, text

from kanban.state.migrations import statements

_SOURCES = ("0005_daily", "0007_instances_and_wakeups", "0014_quiet_tick", "0015_wakeups",
            "0018_metrics", "0020_sharded_counts", "0021_scheduled_wakeups",
            "0022_ordered_counts", "0023_card_search")
# Tables and indexes come from the models (but for the one table a single dialect has),
# backfills only from the migrations.
_KINDS = ("CREATE VIRTUAL TABLE ", "CREATE TRIGGER ", "CREATE FUNCTION ",
          "CREATE OR REPLACE FUNCTION ", "CREATE TABLE card_search ",
          "CREATE INDEX ix_card_search_document ")
_NAME = re.compile(r"CREATE (?:OR REPLACE )?(?:VIRTUAL TABLE|TRIGGER|FUNCTION|TABLE|INDEX) "
                   r"(\w+)")
_DROPPED = re.compile(r"DROP (?:TRIGGER|FUNCTION) (\w+)")


def partial_where(clause: str) -> dict[str, Any]:
    """A partial index's WHERE, for both dialects."""
    return {"sqlite_where": text(clause), "postgresql_where": text(clause)}


def trigger_statements(dialect: str) -> list[str]:
    """The full-text and column-count DDL of `dialect`'s migrations, in their order. An
    object a later migration defines again keeps its first place (what uses it comes after)
    with its last definition; one a later migration drops is gone until defined again."""
    found: dict[str, str] = {}
    for stem in _SOURCES:
        text = resources.files("kanban.state.migrations").joinpath(f"{stem}.{dialect}.sql")
        for statement in statements(text.read_text()):
            if statement.startswith(_KINDS):
                found[_NAME.match(statement).group(1)] = statement  # type: ignore[union-attr]
            elif dropped := _DROPPED.match(statement):
                found.pop(dropped.group(1), None)
    return list(found.values())


def add_triggers(metadata: MetaData) -> None:
    """Run each dialect's statements after `metadata.create_all` made the tables."""
    for dialect in ("sqlite", "postgresql"):
        for statement in trigger_statements(dialect):
            ddl = DDL(statement.replace("%", "%%"))  # DDL formats its text with %
            event.listen(metadata, "after_create", ddl.execute_if(dialect=dialect))
