"""Rescue acts on a process only when it is certainly the worker: an orphan of a dead
dispatcher instance of this host's current boot whose pid still names the process started
for it. Real processes stand in for orphaned workers; the store is a real SQLite file."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from kanban import claims, control
from kanban.cards import NewCard
from kanban.dispatcher.environment import providers_in_use
from kanban.dispatcher.instance import Instance, process_start
from kanban.dispatcher.loop import Dispatcher
from kanban.dispatcher.rescue import ORPHAN_TIMEOUT_GRACE_S, rescue_leases
from kanban.service import Kanban
from kanban.state.config import Config
from kanban.state.config_file import load_config, resolve_config, worker_config
from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError
from kanban.states import Outcome
from kanban.tools.scope import WorkerScope
from kanban.worker.heartbeat import HeartbeatThread
from kanban.worker.main import EXIT_FATAL, main
from kanban.worker.watchdog import Watchdog
from tests.support.db import FakeClock, claim_one, open_sqlite, runs_of
from tests.support.procs import wait_until

LEASE_S = 30.0


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[Kanban]:
    db = open_sqlite(tmp_path / "kanban.db")
    yield Kanban(db, clock=FakeClock())
    db.dispose()


@pytest.fixture
def dispatcher(kb: Kanban, tmp_path: Path) -> Dispatcher:
    d = Dispatcher(kb, Config(), home=tmp_path, db_target=str(kb.db.path))
    with kb.db.write() as conn:
        d.id = _register(conn, kb, d.instance)
    return d


@pytest.fixture
def orphan() -> Iterator[subprocess.Popen[bytes]]:
    """A live process in its own session, as a worker whose dispatcher died."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _register(conn: object, kb: Kanban, instance: Instance, *, beat_ago_s: float = 0.0) -> int:
    now = kb.clock() - timedelta(seconds=beat_ago_s)
    return control.register_dispatcher(conn, host=instance.host, pid=instance.pid, now=now,  # type: ignore[arg-type]
                                        instance=instance.id, boot_id=instance.boot_id,
                                        booted_at=instance.booted_at)


def _orphaned_card(kb: Kanban, owner: Instance, *, pid: int | None, start: int | None,
                   owner_alive: bool = False, timeout_s: float | None = None) -> int:
    card = kb.add_card(NewCard("orphaned", timeout_s=timeout_s))
    with kb.db.write() as conn:
        owner_id = _register(conn, kb, owner, beat_ago_s=0 if owner_alive else 3600)
    claim = kb.claim(1, lease_s=LEASE_S, dispatcher_id=owner_id, host=owner.host)[0]
    assert claim.card_id == card.id
    with kb.db.write() as conn:  # its model had a turn: a lapse is the worker's own
        claims.append_message(conn, claim.run_id, 1, {"role": "user", "content": "go"},
                              now=kb.clock())
        if pid is not None:
            claims.set_run_process(conn, claim.run_id, pid=pid, host=owner.host,
                                   proc_start=start)
    return card.id


def _dead_instance_of(d: Dispatcher, **changes: object) -> Instance:
    base = {"host": d.instance.host, "pid": 1, "boot_id": d.instance.boot_id,
            "booted_at": d.instance.booted_at}
    return Instance(**{**base, **changes})  # type: ignore[arg-type]


def _alive(proc: subprocess.Popen[bytes]) -> bool:
    return process_start(proc.pid) is not None


def test_an_orphan_of_a_dead_instance_of_this_boot_is_killed(
        kb: Kanban, dispatcher: Dispatcher, orphan: subprocess.Popen[bytes]) -> None:
    card = _orphaned_card(kb, _dead_instance_of(dispatcher), pid=orphan.pid,
                          start=process_start(orphan.pid))
    kb.clock.advance(LEASE_S + 1)  # type: ignore[attr-defined]
    rescue_leases(dispatcher)
    orphan.wait(timeout=10)
    assert not _alive(orphan)
    assert kb.card(card).status == "ready"
    assert [r["outcome"] for r in runs_of(kb.db, card)] == [Outcome.LEASE_LOST]


@pytest.mark.parametrize("why", ["pid reused", "another boot"])
def test_a_pid_that_names_another_process_is_never_signalled(
        kb: Kanban, dispatcher: Dispatcher, orphan: subprocess.Popen[bytes], why: str) -> None:
    start = process_start(orphan.pid)
    assert start is not None
    if why == "pid reused":  # same boot, but the pid now names a process started later
        owner, recorded = _dead_instance_of(dispatcher), start - 1
    else:  # the very same (pid, start) numbers, from a boot that is over
        owner, recorded = _dead_instance_of(dispatcher, boot_id="an-earlier-boot"), start
    card = _orphaned_card(kb, owner, pid=orphan.pid, start=recorded)
    kb.clock.advance(LEASE_S + 1)  # type: ignore[attr-defined]
    rescue_leases(dispatcher)
    assert _alive(orphan)
    assert kb.card(card).status == "ready"  # requeued all the same: its lease ran out


def test_a_live_instance_keeps_its_own_workers(
        kb: Kanban, dispatcher: Dispatcher, orphan: subprocess.Popen[bytes]) -> None:
    other = Instance(pid=2)
    card = _orphaned_card(kb, other, pid=orphan.pid, start=process_start(orphan.pid),
                          owner_alive=True)
    kb.clock.advance(LEASE_S + 1)  # type: ignore[attr-defined]
    with kb.db.write() as conn:  # the other instance is alive: it beats
        conn.run("UPDATE dispatcher SET heartbeat_at = :now WHERE instance = :i",
                 {"now": kb.clock(), "i": other.id})
    rescue_leases(dispatcher)
    assert _alive(orphan)
    assert kb.card(card).status == "running"


def test_an_orphan_past_its_timeout_is_stopped_by_a_surviving_dispatcher(
        kb: Kanban, dispatcher: Dispatcher, orphan: subprocess.Popen[bytes]) -> None:
    card = _orphaned_card(kb, _dead_instance_of(dispatcher), pid=orphan.pid,
                          start=process_start(orphan.pid), timeout_s=5)
    kb.clock.advance(4)  # type: ignore[attr-defined]
    rescue_leases(dispatcher)
    assert _alive(orphan)  # within its time (and its lease): left alone
    kb.clock.advance(ORPHAN_TIMEOUT_GRACE_S + 2)  # type: ignore[attr-defined]
    with kb.db.write() as conn:  # still heartbeating: only the timeout is over
        conn.run("UPDATE card SET lease_expires_at = :until WHERE id = :id",
                 {"until": kb.clock() + timedelta(seconds=LEASE_S), "id": card})
    rescue_leases(dispatcher)
    orphan.wait(timeout=10)
    assert [r["outcome"] for r in runs_of(kb.db, card)] == [Outcome.TIMED_OUT]


def test_a_claim_whose_worker_never_started_is_handed_back(
        kb: Kanban, dispatcher: Dispatcher) -> None:
    card = _orphaned_card(kb, _dead_instance_of(dispatcher), pid=None, start=None)
    kb.clock.advance(LEASE_S + 1)  # type: ignore[attr-defined]
    rescue_leases(dispatcher)
    after = kb.card(card)
    assert after.status == "ready" and after.attempt - after.retry_base == 0
    assert [r["outcome"] for r in runs_of(kb.db, card)] == [Outcome.HANDED_BACK]


def test_an_orphan_stops_itself_after_its_timeout(kb: Kanban) -> None:
    card = kb.add_card(NewCard("overruns", max_attempts=1))
    claim = claim_one(kb, card.id)
    scope = WorkerScope(kb, "default", card.id, claim.claim_token, claim.run_id)
    exits: list[int] = []
    scope.deadline = Watchdog(scope, 0.05, grace_s=0.05, exit=exits.append)
    heartbeat = HeartbeatThread(scope)  # the lease is 30 s: only the deadline wakes it
    heartbeat.start()
    try:
        wait_until(lambda: exits == [0], timeout=10, what="the worker's own timeout")
    finally:
        heartbeat.stop()
    after = kb.card(card.id)
    assert after.status == "failed" and "stopped by the worker itself" in (after.error or "")
    assert [r["outcome"] for r in runs_of(kb.db, card.id)] == [Outcome.TIMED_OUT]


def test_a_stopped_watchdog_does_nothing(kb: Kanban) -> None:
    card = kb.add_card(NewCard("finishes in time"))
    claim = claim_one(kb, card.id)
    scope = WorkerScope(kb, "default", card.id, claim.claim_token, claim.run_id)
    exits: list[int] = []
    watchdog = Watchdog(scope, 0.2, grace_s=0.0, exit=exits.append)
    assert watchdog.remaining() is not None
    watchdog.stop()
    watchdog.deadline = time.monotonic() - 1  # overdue, but stopped
    watchdog.check()
    assert watchdog.remaining() is None
    assert exits == [] and kb.card(card.id).status == "running"


def test_workers_read_exactly_their_dispatchers_config(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "kanban.toml"
    path.parent.mkdir()
    path.write_text('[limits]\nlease_s = 7.0\n')
    assert resolve_config(tmp_path, {"KANBAN_CONFIG": str(path)}).limits.lease_s == 7.0
    assert worker_config({"KANBAN_CONFIG": str(path)}).path == path
    assert worker_config({"KANBAN_CONFIG": ""}).path is None  # the dispatcher had none
    assert load_config(tmp_path / "absent.toml").limits.lease_s == 30.0  # the defaults
    with pytest.raises(ConfigError, match="KANBAN_CONFIG is not set"):
        worker_config({})
    with pytest.raises(ConfigError, match="no such config file"):
        worker_config({"KANBAN_CONFIG": str(tmp_path / "gone.toml")})
    with pytest.raises(ConfigError, match="no such config file"):
        resolve_config(tmp_path, {"KANBAN_CONFIG": str(tmp_path / "gone.toml")})


def test_a_worker_whose_config_is_missing_fails_its_card_clearly(kb: Kanban,
                                                                 tmp_path: Path) -> None:
    card = kb.add_card(NewCard("needs its config"))
    claim = claim_one(kb, card.id)
    env = {"KANBAN_DB": str(kb.db.path), "KANBAN_BOARD": "default",
           "KANBAN_CARD": str(card.id), "KANBAN_CLAIM_TOKEN": claim.claim_token,
           "KANBAN_RUN": str(claim.run_id), "KANBAN_CONFIG": str(tmp_path / "gone.toml")}
    assert main(env) == EXIT_FATAL
    after = kb.card(card.id)
    assert after.status == "failed"
    assert after.error is not None and after.error.startswith("config:")
    assert "gone.toml" in after.error


class _SleepSpawner:
    """Starts a stand-in worker (a sleeping process in its own session) per request."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, request: object) -> int:
        proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
        self.procs.append(proc)
        return proc.pid

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("slots", [1, 0])
def test_a_claim_that_landed_while_its_call_failed_is_adopted(
        kb: Kanban, dispatcher: Dispatcher, tmp_path: Path, slots: int) -> None:
    """A COMMIT that reached the server as the connection dropped: the dispatcher saw an
    error, yet the card is claimed under its id. After the outage it starts the worker
    (or hands the card back unspent when no slot is free) instead of leaving the card
    held until the lease runs out."""
    card = kb.add_card(NewCard("claimed in doubt"))
    landed = kb.claim(1, lease_s=LEASE_S, dispatcher_id=dispatcher.id,
                      host=dispatcher.instance.host)[0]
    (tmp_path / "workspaces").mkdir()
    spawner = _SleepSpawner()
    dispatcher.spawner = spawner  # type: ignore[assignment]
    dispatcher.max_workers = slots
    dispatcher._claims_in_doubt = True
    try:
        dispatcher.claim_and_spawn()
        runs = runs_of(kb.db, card.id)
        if slots:
            assert [p.pid for p in spawner.procs] == [dispatcher.workers.by_card(card.id).pid]
            assert kb.card(card.id).status == "running"
            assert len(runs) == 1 and runs[0]["id"] == landed.run_id
            dispatcher.record_processes()
            assert runs_of(kb.db, card.id)[0]["pid"] == spawner.procs[0].pid
        else:
            assert spawner.procs == []
            assert kb.card(card.id).status == "ready"
            assert [r["outcome"] for r in runs] == [Outcome.HANDED_BACK]  # no attempt spent
        assert dispatcher._claims_in_doubt is False
    finally:
        spawner.close()


def test_the_forkserver_preloads_the_adapters_the_profiles_use(kb: Kanban,
                                                               tmp_path: Path) -> None:
    config = parse_config({"profiles": {
        "chat": {"model": "openai:gpt-4o-mini"},
        "long": {"model": "openai:o3", "api": "responses",
                 "fallback": ["anthropic:claude-sonnet-4-5"]},
        "offline": {"model": "scripted:demo"}}})
    assert providers_in_use(config, {}) == {"openai", "openai-responses", "anthropic"}
    offline = parse_config({"profiles": {"default": {"model": "scripted:demo"}}})
    # The built-in profiles (no model of their own) take the first key's default model;
    # a key no profile uses loads nothing until a card asks for it (worker/forkserver.py).
    both = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}
    assert providers_in_use(offline, both) == {"openai"}
    assert providers_in_use(offline, {"ANTHROPIC_API_KEY": "k"}) == {"anthropic"}


def test_many_free_slots_are_claimed_in_short_batches_in_one_pass(
        kb: Kanban, dispatcher: Dispatcher, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """40 slots and 40 ready cards: one pass starts them all, claiming CLAIM_BATCH at a
    time (each claim holds SQLite's write lock for a few cards, not for all of them)."""
    from kanban.dispatcher import loop

    cards = [kb.add_card(NewCard(f"card {i}")).id for i in range(40)]
    (tmp_path / "workspaces").mkdir()
    spawner = _SleepSpawner()
    dispatcher.spawner = spawner  # type: ignore[assignment]
    dispatcher.max_workers = 40
    sizes: list[int] = []
    claim = kb.claim

    def counted(n: int, **kwargs: object) -> list[object]:
        got = claim(n, **kwargs)  # type: ignore[arg-type]
        sizes.append(len(got))
        return got  # type: ignore[return-value]

    monkeypatch.setattr(kb, "claim", counted)
    try:
        dispatcher.claim_and_spawn()
        assert sizes == [loop.CLAIM_BATCH, loop.CLAIM_BATCH, 40 - 2 * loop.CLAIM_BATCH]
        assert len(spawner.procs) == 40
        assert {kb.card(c).status for c in cards} == {"running"}
        assert all(r["pid"] for c in cards for r in runs_of(kb.db, c))  # recorded per batch
    finally:
        spawner.close()
