"""A worker cut off from the database steps aside before its lease lapses: it exits as the
host's fault (the dispatcher hands the card back, no attempt spent) instead of letting the
lease run out (which spends one). Its retries, and its heartbeat's, ask the scope, counting
the wait before their next try."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.errors import TransientDatabaseError
from kanban.tools.scope import LAPSE_MARGIN_S, WorkerScope
from kanban.worker.outcome import retrying
from tests.support.db import claim_one


class SteppedAside(Exception):
    pass


def scope_with(kb: Kanban, left_s: float, said: list[str]) -> WorkerScope:
    claim = claim_one(kb, kb.add_card(NewCard("cut off")).id)

    def cut_off(message: str) -> None:
        said.append(message)
        raise SteppedAside(message)  # the worker's own exits the process here

    return WorkerScope(kb, claim.board, claim.card_id, claim.claim_token, claim.run_id,
                       lease_s=30.0, on_cut_off=cut_off,
                       lease_until=kb.clock() + timedelta(seconds=left_s))


def away() -> None:
    raise TransientDatabaseError("cannot connect: too many connections for role \"w\"")


def test_retries_step_aside_when_the_lease_is_about_to_lapse(kb: Kanban) -> None:
    said: list[str] = []
    scope = scope_with(kb, LAPSE_MARGIN_S / 2, said)
    with pytest.raises(SteppedAside):
        retrying(scope, away)
    assert said == ["the database stayed unreachable as the lease ran out (cannot connect: "
                    "too many connections for role \"w\")"]
    with pytest.raises(SteppedAside):
        scope.write(lambda conn: away(), fenced=False)


def test_a_wait_that_would_cross_the_margin_steps_aside_before_it(kb: Kanban) -> None:
    said: list[str] = []
    scope = scope_with(kb, LAPSE_MARGIN_S + 2, said)
    scope.step_aside_if_lapsing(TransientDatabaseError("away"), wait_s=1.0)
    assert said == []
    with pytest.raises(SteppedAside):
        scope.step_aside_if_lapsing(TransientDatabaseError("away"), wait_s=3.0)


def test_with_time_left_the_retries_go_on(kb: Kanban) -> None:
    said: list[str] = []
    scope = scope_with(kb, 25.0, said)
    tries = []

    def away_twice() -> str:
        tries.append(1)
        if len(tries) < 3:
            away()
        return "back"

    assert retrying(scope, away_twice) == "back" and said == []
