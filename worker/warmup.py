"""Compile a worker's statements once in the forkserver so forked workers inherit them.

SQLAlchemy caches compiled SQL per engine; a worker forked after this finds its
queries ready. Everything runs in a transaction that is rolled back.
"""

from __future__ import annotations

from contextlib import suppress

from agent.types import Message
from kanban import cards, claims, transitions
from kanban.transitions import Actor
from state.engine import Database
from state.timeutil import utcnow

_NO_CARD = -1


def warm(db: Database) -> None:
    now = utcnow()
    actor = Actor("warmup", "x")
    steps = (
        lambda c: cards.get_card(c, _NO_CARD),
        lambda c: cards.card_detail(c, _NO_CARD),
        lambda c: transitions.assert_lease(c, _NO_CARD, "x"),
        lambda c: claims.heartbeat(c, _NO_CARD, "x", run_id=_NO_CARD, lease_s=1, now=now),
        lambda c: claims.append_message(c, _NO_CARD, 0, Message("system", "x").to_dict(),
                                        now=now),
        lambda c: claims.record_usage(c, _NO_CARD, _NO_CARD, "m", input_tokens=0,
                                      output_tokens=0, cached_tokens=0, now=now),
        lambda c: transitions.complete(c, _NO_CARD, "x", now=now, actor=actor),
        lambda c: transitions.add_comment(c, _NO_CARD, "x", author="w", now=now),
    )
    with db.engine.connect() as conn:
        conn.begin()
        for step in steps:
            with suppress(Exception):  # best effort: each step only needs to get compiled
                step(conn)
        conn.rollback()
    db.dispose()  # no connection may cross a fork
