"""Which trace a card's runs belong to: the W3C traceparent stored with the card (issue 32).

A card delegated by a run continues that run's trace; a root card continues its own first
run's. Only workers with telemetry on read or write it.
"""

from __future__ import annotations

from kanban.state.store import Conn


def trace_parent(conn: Conn, card_id: int) -> str | None:
    """The traceparent the card's runs hang under (None: a run starts a trace)."""
    value = conn.scalar("SELECT traceparent FROM card WHERE id = :id", {"id": card_id})
    return str(value) if value else None


def adopt_trace(conn: Conn, card_id: int, traceparent: str) -> None:
    """A root card's first traced run: its later runs continue this trace."""
    conn.execute("UPDATE card SET traceparent = :tp WHERE id = :id AND traceparent IS NULL",
                 {"tp": traceparent, "id": card_id})


def pass_trace(conn: Conn, parent_id: int, traceparent: str) -> None:
    """Cards the parent's run made (delegated, created, sent to review) continue its trace;
    called in the transaction that made them, so none starts before it is set."""
    conn.execute("UPDATE card SET traceparent = :tp WHERE parent_id = :id "
                 "AND traceparent IS NULL", {"tp": traceparent, "id": parent_id})
