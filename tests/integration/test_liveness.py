"""Liveness that cannot lie: a dispatcher row whose process is gone is not alive however
fresh its heartbeat, and a lead whose `kanban run` process is gone is requeued at once,
spending no attempt. Real processes stand in for the dead and the living."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanban import control
from kanban.cards import NewCard
from kanban.claims import claim_card
from kanban.dispatcher.instance import boot_id
from kanban.dispatcher.loop import Dispatcher
from kanban.dispatcher.rescue import adopt_dead_instances, rescue_leases
from kanban.lead_liveness import waiting_for
from kanban.service import Kanban
from kanban.state.config import Config
from tests.support.db import FakeClock, open_sqlite


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Kanban]:
    db = open_sqlite(tmp_path / "kanban.db")
    yield Kanban(db, clock=FakeClock())
    db.dispose()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _register(kb: Kanban, pid: int, *, boot: str | None) -> int:
    with kb.db.write() as conn:
        return control.register_dispatcher(conn, host=socket.gethostname(), pid=pid,
                                           now=kb.clock(), board=None, boot_id=boot)


def _serving(kb: Kanban) -> list[int]:
    with kb.db.read() as conn:
        return [d.id for d in control.serving_dispatchers(conn, "default", kb.clock())]


def test_a_fresh_row_of_a_dead_process_is_not_alive(kb: Kanban) -> None:
    live = _register(kb, os.getpid(), boot=boot_id())
    dead = _register(kb, _dead_pid(), boot=boot_id())
    unknown_boot = _register(kb, _dead_pid(), boot=None)  # cannot be proven dead here
    assert _serving(kb) == [live, unknown_boot]
    assert dead not in _serving(kb)


def _lead(kb: Kanban) -> int:
    card = kb.add_card(NewCard("a lead", created_by="lead", role="orchestrator"))
    with kb.db.write() as conn:
        claim_card(conn, card.id, now=kb.clock(), lease_s=30, host=socket.gethostname())
    return card.id


def _dispatcher(kb: Kanban, tmp_path: Path) -> Dispatcher:
    d = Dispatcher(kb, Config(), home=tmp_path, db_target=str(kb.db.path))
    d.id = _register(kb, os.getpid(), boot=boot_id())
    return d


def test_a_lead_whose_process_is_gone_is_requeued_at_once(kb: Kanban, tmp_path: Path) -> None:
    gone, alive = _lead(kb), _lead(kb)
    with kb.db.write() as conn:  # `gone`'s kanban run process has died
        conn.run("UPDATE run SET pid = :pid WHERE card_id = :id", {"pid": _dead_pid(),
                                                                   "id": gone})
    d = _dispatcher(kb, tmp_path)
    adopt_dead_instances(d)  # at a dispatcher's start: no waiting for the lease (30 s)
    assert kb.card(gone).status == "ready"
    assert kb.card(gone).attempt - kb.card(gone).retry_base == 0  # no attempt spent
    assert kb.card(alive).status == "running"  # this very process holds it
    rescue_leases(d)
    assert kb.card(alive).status == "running"
    with kb.db.read() as conn:
        assert waiting_for(conn, gone) == f"#{gone} is ready, for a dispatcher to claim it"
