"""The forkserver keeps one spare worker forked ahead of need: a request goes to it (its
pid is the worker's), a spare that never ran a card is never reported as a worker's exit,
and the spare leaves when the forkserver does. A model SDK no profile preloaded is loaded
after the first worker that asks for it."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from kanban.agent.gateway import NAME
from kanban.dispatcher import spawn
from kanban.dispatcher.spawn import ForkServerSpawner, SpawnRequest
from kanban.worker import forkserver
from kanban.worker.main import EXIT_BAD_ENV
from tests.support.procs import wait_until


def children(pid: int) -> list[int]:
    """The living forks of the server `pid` (its spare, its workers), in pid order. Not its
    model gateway, nor whatever else it holds for a moment as a subreaper: the host probe's
    leftovers, adopted and being killed, run other programs or are already zombies.
    None until the gateway has its name: forked first, it looks like a spare until then."""
    found: list[int] = []
    if not gateways(pid):
        return found
    try:
        server = (Path(f"/proc/{pid}") / "cmdline").read_bytes()
    except OSError:
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, parent = stat.rsplit(")", 1)[1].split()[:2]
        gateway = stat.split("(", 1)[1].rsplit(")", 1)[0] == NAME  # not a worker
        if int(parent) == pid and state != "Z" and cmdline == server and not gateway:
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_requests_go_to_the_spare_and_a_new_one_follows(tmp_path: Path) -> None:
    spawner = ForkServerSpawner({"PATH": os.environ["PATH"]}, threading.Event())
    try:
        spare = wait_until(lambda: children(spawner.pid), timeout=30, what="a spare")[0]
        # No KANBAN_* variables: the worker says so in its log and exits at once.
        request = SpawnRequest(env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path / "w"),
                               log=str(tmp_path / "worker.log"))
        assert spawner.spawn(request) == spare
        assert spawner.exits.get(timeout=30) == (spare, EXIT_BAD_ENV)
        assert "worker environment incomplete" in (tmp_path / "worker.log").read_text()
        assert (tmp_path / "w").is_dir()
        follower = wait_until(lambda: [p for p in children(spawner.pid) if p != spare],
                              timeout=30, what="the next spare")[0]
        assert spawner.exits.empty()  # a waiting spare is nobody's worker
    finally:
        spawner.close()
    wait_until(lambda: not alive(follower), timeout=30, what="the spare to leave")
    assert spawner.exits.empty()


def test_a_dead_spare_is_replaced_by_a_fork_and_never_reported(tmp_path: Path) -> None:
    spawner = ForkServerSpawner({"PATH": os.environ["PATH"]}, threading.Event())
    try:
        spare = wait_until(lambda: children(spawner.pid), timeout=30, what="a spare")[0]
        os.kill(spare, 9)
        # Gone from /proc: reaped by the server. Not "not in children()": a process on its
        # way out has no cmdline while it still holds its socket, and a request handed to
        # it then is that worker's (its exit is then reported, as any worker's).
        wait_until(lambda: not Path(f"/proc/{spare}").exists(), timeout=30,
                   what="the killed spare reaped")
        request = SpawnRequest(env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path / "w"),
                               log=str(tmp_path / "worker.log"))
        pid = spawner.spawn(request)
        assert pid != spare
        assert spawner.exits.get(timeout=30) == (pid, EXIT_BAD_ENV)
        assert spawner.exits.empty()
    finally:
        spawner.close()


def sdk_libraries(pid: int) -> set[str]:
    """The model SDKs' compiled parts mapped into process `pid` (jiter: both SDKs parse
    streamed JSON with it; nothing else kanban loads does)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {name for name in ("jiter", "_pydantic_core") if f"/{name}." in maps}


def test_a_model_no_profile_named_is_loaded_after_its_first_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spawner = ForkServerSpawner({"PATH": os.environ["PATH"]}, threading.Event())
    try:
        wait_until(lambda: children(spawner.pid), timeout=30, what="a spare")
        assert "jiter" not in sdk_libraries(spawner.pid)
        def request(n: int, model: str | None = None) -> SpawnRequest:
            env = {"PATH": os.environ["PATH"], **({"KANBAN_MODEL": model} if model else {})}
            return SpawnRequest(env=env, cwd=str(tmp_path / f"w{n}"),
                                log=str(tmp_path / f"{n}.log"))

        pid = spawner.spawn(request(0, "scripted:demo"))  # nothing to load for it
        assert spawner.exits.get(timeout=30) == (pid, EXIT_BAD_ENV)
        wait_until(lambda: children(spawner.pid), timeout=30, what="the next spare")
        assert "jiter" not in sdk_libraries(spawner.pid)
        cold = spawner.spawn(request(1, "anthropic:claude"))
        # A request while it loads waits past the usual patience (the server said why),
        # then gets that patience anew from the server's "done loading": a fork on a busy
        # machine takes a good part of a second, an SDK's import longer.
        wait_until(lambda: spawner._warming == "anthropic", timeout=30, what="warming")
        monkeypatch.setattr(spawn, "REPLY_S", 0.5)
        pid = spawner.spawn(request(2))
        assert "jiter" in sdk_libraries(spawner.pid)  # answered once it was loaded
        assert spawner._warming is None
        assert sorted([spawner.exits.get(timeout=30), spawner.exits.get(timeout=30)]) == \
            sorted([(cold, EXIT_BAD_ENV), (pid, EXIT_BAD_ENV)])
        # the spare forked after it has it too: the next such worker starts warm
        spare = wait_until(lambda: children(spawner.pid), timeout=30, what="the next spare")[0]
        assert "jiter" in sdk_libraries(spare)
    finally:
        spawner.close()


def gateways(pid: int) -> list[int]:
    """The model gateway the server `pid` forked (one while it runs)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if stat and stat.split("(", 1)[1].rsplit(")", 1)[0] == NAME:
            state, parent = stat.rsplit(")", 1)[1].split()[:2]
            if int(parent) == pid and state != "Z":
                found.append(int(entry.name))
    return found


def test_a_gateway_that_dies_is_forked_again_and_leaves_with_the_server() -> None:
    spawner = ForkServerSpawner({"PATH": os.environ["PATH"]}, threading.Event())
    try:
        first = wait_until(lambda: gateways(spawner.pid), timeout=30, what="a gateway")
        assert len(first) == 1
        os.kill(first[0], signal.SIGKILL)
        again = wait_until(lambda: [p for p in gateways(spawner.pid) if p != first[0]],
                           timeout=30, what="a new gateway")
        assert spawner.exits.empty()  # a gateway is nobody's worker
    finally:
        spawner.close()
    wait_until(lambda: not alive(again[0]), timeout=30, what="the gateway to leave")


def test_gateways_that_keep_ending_at_once_are_not_forked_in_a_loop(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    forked: list[int] = []

    def open_gateway(fork: object) -> int:
        forked.append(1)
        return 1000 + len(forked)

    monkeypatch.setattr(forkserver.gateway, "open_gateway", open_gateway)
    lived = forkserver.ForkServer(0, 1, None, spares=False)
    lived._open_gateway()
    lived.gateway_since -= forkserver.GATEWAY_QUICK_S  # it ran a while, then ended
    lived._gateway_ended()
    assert len(forked) == 2 and lived.gateway is not None
    forked.clear()
    quick = forkserver.ForkServer(0, 1, None, spares=False)
    quick._open_gateway()
    for _ in range(forkserver.GATEWAY_QUICK_ENDS):
        quick._gateway_ended()  # each at once after its start
    assert len(forked) == forkserver.GATEWAY_QUICK_ENDS and quick.gateway is None
    assert "workers make their own model calls" in capsys.readouterr().err
