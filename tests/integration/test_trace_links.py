"""The trace a card's runs continue, on every store: set in the transaction that made the
card, never overwritten, and read back by the worker."""

from __future__ import annotations

import pytest

from kanban.cards import NewCard, add_card
from kanban.service import Kanban
from kanban.state.store import Database
from kanban.tools.scope import WorkerScope
from kanban.trace_links import adopt_trace, trace_parent
from tests.support.db import LEASE_S, STORES, claim_one

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)
LEAD_RUN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LATER_RUN = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"


def _scope(kb: Kanban, card_id: int) -> WorkerScope:
    claim = claim_one(kb, card_id)
    return WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id,
                       lease_s=LEASE_S)


def _child(scope: WorkerScope, title: str) -> int:
    return scope.write(lambda conn: add_card(conn, NewCard(
        title, parent_id=scope.card_id, created_by=scope.actor.name), scope.kb.clock())).id


def test_cards_a_traced_run_makes_continue_its_span(kb: Kanban, db: Database) -> None:
    lead = kb.add_card(NewCard("lead")).id
    other = kb.add_card(NewCard("not its child")).id
    scope = _scope(kb, lead)
    untraced = _child(scope, "made with traces off")
    with db.read() as conn:
        assert trace_parent(conn, untraced) is None
    scope.traceparent = LEAD_RUN
    traced = _child(scope, "made by the traced run")
    with db.read() as conn:  # in the same write: the child made before tracing began too
        assert trace_parent(conn, traced) == trace_parent(conn, untraced) == LEAD_RUN
        assert trace_parent(conn, other) is None
    scope.traceparent = LATER_RUN  # a later run's span never replaces a child's
    later = _child(scope, "made by the later run")
    with db.read() as conn:
        assert trace_parent(conn, traced) == trace_parent(conn, untraced) == LEAD_RUN
        assert trace_parent(conn, later) == LATER_RUN
        assert trace_parent(conn, other) is None


def test_a_root_keeps_its_first_runs_span(kb: Kanban, db: Database) -> None:
    root = kb.add_card(NewCard("root")).id
    with db.write() as conn:
        adopt_trace(conn, root, LEAD_RUN)
        adopt_trace(conn, root, LATER_RUN)
    with db.read() as conn:
        assert trace_parent(conn, root) == LEAD_RUN
