"""A worker's part in review gates and triage: a verify gate's command before the card
leaves `running`, and a triaged card's roll-up of its children's results."""

from __future__ import annotations

from kanban import transitions
from kanban.records import CardRecord
from kanban.review import VERIFY, Gate, Verdict
from kanban.state.store import Conn
from kanban.tools.scope import WorkerScope
from kanban.tools.workbench import Workbench
from kanban.triage import rollup, triaged_children, unfinished
from kanban.worker.heartbeat import HeartbeatThread


def arm(scope: WorkerScope, card: CardRecord, bench: Workbench) -> None:
    """A gated card completes into review; a verify gate's command runs before that."""
    gate = Gate.of(card)
    scope.gated = gate is not None
    if gate is not None and gate.kind == VERIFY:
        from kanban.tools.verify import verify

        scope.verify = lambda: verify(gate.arg, bench)


def verdict(scope: WorkerScope) -> Verdict | None:
    """A verify gate's verdict after the agent stopped, the lease renewed meanwhile (the
    agent's heartbeat thread has stopped by then)."""
    if scope.verify is None:
        return None
    heartbeat = HeartbeatThread(scope)
    heartbeat.start()
    try:
        return scope.verify()
    finally:
        heartbeat.stop()


def roll_up(scope: WorkerScope, card: CardRecord) -> None:
    """A triaged card completes with its children's results (its own gate, if any, still
    applies), or is blocked for a person when not all of them are done; one fenced write."""

    def finish(conn: Conn) -> None:
        children = triaged_children(conn, card.id)
        why = unfinished(children)
        now = scope.kb.clock()
        if why is not None:
            transitions.block(conn, card.id, why, now=now, actor=scope.actor)
            return
        transitions.complete(conn, card.id, rollup(children), now=now, actor=scope.actor,
                             gated=card.review is not None)

    scope.write(finish)
