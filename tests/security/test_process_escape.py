"""Ways out through processes: a daemon that outlives its card or its worker, a command that
fills the disk, and a same-user process reading the dispatcher's credentials from /proc."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from kanban.tools.budget import disk_usage
from kanban.tools.sandbox import SandboxPolicy
from tests.acceptance.conftest import slow_steps
from tests.security.conftest import Attack
from tests.support.llm_bodies import tool_results
from tests.support.llm_server import LLMServer, Reply, text_reply, tool_reply
from tests.support.procs import KANBAN, query, start_dispatcher, stop, wait_until
from tests.support.sandbox import require_bwrap

TERMINAL = 'toolsets = ["kanban", "terminal", "file"]\napproval = "allow"\n'
BUDGET = 50_000_000
MARGIN = 30_000_000  # what a flood can write between two looks at the workspace


def marker() -> str:
    """A sleep duration no other process on the host has in its argv."""
    return f"300{random.randrange(10**8):08d}"


def marked(mark: str, program: bytes = b"") -> list[int]:
    """Living processes whose argv holds `mark` (zombies wait for a reaper: they are dead),
    running `program` if one is named."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if mark.encode() in argv and state not in ("Z", "X") \
                and argv.startswith(program + b"\0" if program else b""):
            found.append(int(entry.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def shown(attack: Attack, card: int) -> list[str]:
    """The tool results the card's model was given (a result that blocks the card ends the
    run: the model never reads it back)."""
    return [text for (text,) in query(
        attack.board.path, "SELECT m.content FROM message m JOIN run r ON r.id = m.run_id "
        "WHERE r.card_id = ? AND m.role = 'tool' ORDER BY m.id", card)]


def profile(sandbox: str) -> str:
    if sandbox != "off":
        require_bwrap()
    return f'{TERMINAL}sandbox = "{sandbox}"'


DAEMONS = {
    "setsid in the background": "setsid sleep {m} > /dev/null 2>&1 &",
    "double fork": "(sleep {m} > /dev/null 2>&1 &) ; exit",
    "setsid -f": "setsid -f sleep {m} > /dev/null 2>&1",
    "a daemon's own child": "setsid sh -c 'sleep {m} & sleep {m}' > /dev/null 2>&1 &",
    "nohup setsid, given time": "nohup setsid sleep {m} > /dev/null 2>&1 & sleep 0.5",
    # Each process forks the next and waits: killing one orphans only the next, so a sweep
    # that takes one generation a round must go on until none is left.
    "a chain deeper than a sweep's rounds": "setsid python3 -c 'import os, time\n"
    "for _ in range(80):\n    if os.fork(): time.sleep(30 + {m} % 30); os._exit(0)\n"
    "time.sleep(30 + {m} % 30)' > /dev/null 2>&1 & sleep 0.5",
    # A process that forks and exits at once, for ever: its pid changes faster than a
    # sweep can list and kill it (it gives up by itself after a minute, in case).
    "a pid hopper": "setsid python3 -c 'import os, time\nend = time.time() + 30 + {m} % 30\n"
    "while time.time() < end:\n    os.fork() and os._exit(0)' > /dev/null 2>&1 & sleep 0.5",
}


@pytest.mark.parametrize("sandbox", ["off", "required"])
@pytest.mark.parametrize("how", sorted(DAEMONS))
def test_a_daemon_started_by_a_command_dies_when_the_card_ends(
        attack: Attack, how: str, sandbox: str) -> None:
    attack.configure(profile(sandbox))
    mark = marker()
    try:
        card, seen = attack.run([("terminal", {"command": DAEMONS[how].format(m=mark)})])
        assert attack.card(card)[0] == "done", seen
        wait_until(lambda: not marked(mark), timeout=10, what="the daemon gone")
    finally:
        kill_all(marked(mark))


def once_then_complete(call: tuple[str, dict[str, Any]]) -> Any:
    """A model that makes `call` on the first request of all and completes afterwards (the
    retry of a card whose worker was killed must not start the command again)."""
    made: list[bool] = []

    def respond(body: dict[str, Any]) -> Reply:
        if not made:
            made.append(True)
            return tool_reply(call)
        if tool_results(body):
            return tool_reply(("kanban_complete", {"summary": "over"}))
        return text_reply("done")

    return respond


@pytest.mark.parametrize(("sandbox", "cold"), [("off", False), ("required", False),
                                               ("off", True)])
def test_a_running_command_and_its_daemon_die_with_a_killed_worker(
        attack: Attack, tmp_path: Path, sandbox: str, cold: bool) -> None:
    """A cold worker's parent is the dispatcher, which adopts nothing: there only the
    command's own process group is sure to die (its `timeout` gets the death signal)."""
    attack.configure(profile(sandbox))
    mark, card = marker(), attack.board.add("long command", profile="attacker")
    daemon = "" if cold else f"setsid sleep {mark} > /dev/null 2>&1 & "
    command = f"{daemon}sleep {mark} & sleep {mark}"
    with LLMServer(responder=once_then_complete(
            ("terminal", {"command": command, "timeout_s": 600}))) as server:
        dispatcher = start_dispatcher(attack.board.path, *(["--cold"] if cold else []),
                                      env=attack.canaries.env(server),
                                      log=tmp_path / "dispatcher.log")
        try:
            wait_until(lambda: len(marked(mark, b"sleep")) == (2 if cold else 3), timeout=60,
                       what="the command's sleeps running")
            worker = query(attack.board.path, "SELECT pid FROM run WHERE card_id = ? AND pid "
                           "IS NOT NULL ORDER BY id", card)[0][0]
            os.kill(worker, signal.SIGKILL)
            wait_until(lambda: not marked(mark), timeout=15, what="the command and daemon gone")
        finally:
            kill_all(marked(mark))
            stop(dispatcher)


@pytest.mark.parametrize("sandbox", ["off", "required"])
def test_one_huge_file_stops_at_the_budget_and_blocks_the_card(attack: Attack,
                                                              sandbox: str) -> None:
    attack.configure(profile(sandbox), f"max_workspace_bytes = {BUDGET}")
    card, _ = attack.run([("terminal", {"command": "head -c 2G /dev/zero > big; ls -l"})])
    status, error = attack.card(card)
    seen = shown(attack, card)
    assert status == "blocked"
    assert "max_workspace_bytes" in (error or "") and f"{BUDGET:,}" in (error or "")
    assert "budget" in seen[0] and "blocked" in seen[0]
    used = disk_usage(attack.workspace(card))
    assert BUDGET * 0.9 < used < BUDGET + MARGIN


def test_a_flood_of_small_files_is_stopped_near_the_budget(attack: Attack) -> None:
    attack.configure(profile("off"), f"max_workspace_bytes = {BUDGET}")
    # paced at about 100 MB/s: the budget is polled while a command runs (a writer faster
    # than that passes it by what it writes between two looks; one file cannot: RLIMIT_FSIZE)
    flood = "for i in $(seq 1 2000); do head -c 1000000 /dev/zero > f$i; sleep 0.01; done"
    card, _ = attack.run([("terminal", {"command": flood, "timeout_s": 300})])
    status, error = attack.card(card)
    seen = shown(attack, card)
    assert status == "blocked", seen
    assert "max_workspace_bytes" in (error or "")
    assert "stopped" in seen[0]
    assert disk_usage(attack.workspace(card)) < BUDGET + MARGIN


FILES = 5_000


@pytest.mark.parametrize(("sandbox", "place", "said"), [
    ("off", "many", f"workspace holds more than its limit of {FILES:,}"),
    ("required", "many", f"workspace and its HOME hold more than its limit of {FILES:,}"),
    ("required", "/tmp/many", "the sandbox's /tmp and /dev/shm (memory)"),
    ("required", "/dev/shm/many", "the sandbox's /tmp and /dev/shm (memory)"),
])
def test_a_flood_of_empty_files_is_stopped_at_the_file_limit(
        attack: Attack, sandbox: str, place: str, said: str) -> None:
    """Empty files take no disk, so a byte budget never sees them. In the workspace each
    takes an inode, and a few million exhaust the file system's for every card and the
    board itself; in the sandbox's /tmp and /dev/shm (tmpfs) each takes about a kilobyte of
    the host's kernel memory, none of the --size bound. Either way the command is stopped
    and the card blocks past max_workspace_files (the flood would make 200,000 files)."""
    attack.configure(profile(sandbox), f"max_workspace_files = {FILES}")
    flood = (f"mkdir -p {place} && cd {place} && "
             "for i in $(seq 1 200); do touch $(seq -f \"$i-%g\" 1 1000); done")
    card, _ = attack.run([("terminal", {"command": flood, "timeout_s": 300})])
    status, error = attack.card(card)
    seen = shown(attack, card)
    assert status == "blocked", seen
    assert said in (error or "") and "max_workspace_files" in (error or ""), error
    assert "stopped" in seen[0]
    if place == "many":  # the workspace's own: the walk that counts stops at the limit
        made = sum(1 for _ in (attack.workspace(card) / place).iterdir())
        assert FILES < made < 200_000


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_fork_bomb_is_stopped_at_the_process_limit(attack: Attack, sandbox: str) -> None:
    """Root's RLIMIT_NPROC does not hold (5,000 processes ran under --nproc=4096 in a root
    sandbox): a fork bomb would take every pid of the host, the dispatcher's next worker
    included. Past max_processes the command is stopped, every process of its sandbox with
    it (these leave the command's group), and the card blocks with the reason. Without a
    sandbox the worker counts what the command started, escaped or not."""
    attack.configure(profile(sandbox), "max_processes = 64")
    mark = marker()
    bomb = f"for i in $(seq 1 400); do setsid sleep {mark} > /dev/null 2>&1 & done; wait"
    error = _stopped_and_blocked(attack, bomb, mark, b"sleep")
    assert "more than 64 processes" in error and "fork bomb" in error, error
    assert "unblock" in error and "Free space" not in error, error


def _stopped_and_blocked(attack: Attack, command: str, mark: str, program: bytes) -> str:
    """Run `command` (its processes' argv hold `mark`), which a limit must stop with every
    process it started, blocking the card; the card's error."""
    card, _ = attack.run([("terminal", {"command": command, "timeout_s": 120})])
    status, error = attack.card(card)
    seen = shown(attack, card)
    left = marked(mark, program)
    kill_all(left)
    assert status == "blocked", seen
    assert "stopped" in seen[0]
    assert left == [], f"{len(left)} processes of the sandbox outlived it"
    return error or ""


HOGS = {
    "heap": "import time; held = b'x' * (100 << 20); time.sleep(600)",
    # Shared memory of its own (a memfd: /dev/shm's 64 MiB bound does not hold it) counts
    # as shared in the kernel's figures, which a count of private memory would skip.
    "memfd": "import mmap, os, time; fd = os.memfd_create('m'); os.ftruncate(fd, 100 << 20); "
             "m = mmap.mmap(fd, 100 << 20); [m.write(b'x' * (1 << 20)) for _ in range(100)]; "
             "time.sleep(600)",
}


@pytest.mark.parametrize("hog", sorted(HOGS))
def test_memory_held_by_many_processes_is_stopped_at_the_memory_limit(attack: Attack,
                                                                      hog: str) -> None:
    """No rlimit bounds a group of processes: four of 100 MiB each stay under any
    per-process bound yet take 400 MiB of the host together. Past max_memory_bytes the
    command is stopped with all its sandbox's processes, and the card blocks."""
    attack.configure(profile("required"), f"max_memory_bytes = {256 << 20}")
    mark = marker()  # argv[1] of each hog
    command = f"for i in 1 2 3 4; do python3 -c \"{HOGS[hog]}\" {mark} & done; wait"
    error = _stopped_and_blocked(attack, command, mark, b"python3")
    assert "more than 256 MiB of memory" in error, error
    assert "max_memory_bytes" in error and "unblock" in error, error


def test_a_command_within_the_memory_limit_runs_to_its_end(attack: Attack) -> None:
    attack.configure(profile("required"), f"max_memory_bytes = {256 << 20}")
    card, (said,) = attack.run([("terminal", {
        "command": "python3 -c \"held = b'x' * (100 << 20); print('held', len(held))\""})])
    assert attack.card(card)[0] == "done", said
    assert f"held {100 << 20}" in said


@pytest.mark.parametrize("sandbox", ["required", "off"])
def test_a_crash_dumps_no_core(attack: Attack, sandbox: str) -> None:
    """A host that pipes core dumps to a handler (systemd-coredump, apport) runs it as root
    with the crashed process's memory and names: a command that makes itself crash would
    reach it. RLIMIT_CORE is 1 (the kernel's sign to skip a pipe, below any file dump's
    size), hard as well: a sandboxed command cannot raise it."""
    attack.configure(profile(sandbox))
    card, (limits, crash) = attack.run([
        ("terminal", {"command": "grep 'Max core' /proc/self/limits; ulimit -c unlimited; "
                                 "echo raised=$?"}),
        ("terminal", {"command": "sh -c 'kill -SEGV $$'; echo crashed=$?; ls"})])
    assert attack.card(card)[0] == "done"
    assert re.search(r"Max core file size\s+1\s+1\s+bytes", limits), limits
    if sandbox == "required":
        assert "raised=1" in limits, limits
    assert "crashed=139" in crash and "core" not in crash.split("crashed=139", 1)[1], crash


def test_what_the_sandbox_starts_without_the_runner_dumps_no_core(tmp_path: Path) -> None:
    """MCP servers and git go through the sandbox's launcher, not the runner's limits."""
    require_bwrap()
    argv = SandboxPolicy(writable=(tmp_path,), network=False).wrap(
        ["grep", "Max core", "/proc/self/limits"], tmp_path)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    assert re.search(r"Max core file size\s+1\s+1\s+bytes", out), out


def test_the_oom_killer_takes_a_sandboxed_command_first(attack: Attack) -> None:
    """A command that eats the host's memory (no limit holds it: address-space limits break
    runtimes that reserve large ranges) must be what the kernel kills, not the dispatcher,
    a worker or the database beside it."""
    attack.configure(profile("required"))
    card, (scores,) = attack.run([("terminal", {
        "command": "cat /proc/self/oom_score_adj; sh -c 'cat /proc/self/oom_score_adj'"})])
    assert attack.card(card)[0] == "done"
    assert scores.split("output")[-1].split()[-2:] == ["1000", "1000"], scores
    assert Path("/proc/self/oom_score_adj").read_text().strip() != "1000"


def test_a_flood_into_the_cards_own_home_counts_against_the_budget(attack: Attack) -> None:
    """The card's HOME lies on the board's disk beside the workspace: files written there
    are the card's too (they were not measured: 2 GB of them passed unseen)."""
    attack.configure(profile("required"), f"max_workspace_bytes = {BUDGET}")
    flood = ("for i in $(seq 1 2000); do head -c 1000000 /dev/zero > ~/f$i; sleep 0.01; "
             "done")
    card, _ = attack.run([("terminal", {"command": flood, "timeout_s": 300})])
    status, error = attack.card(card)
    seen = shown(attack, card)
    assert status == "blocked", seen
    assert "max_workspace_bytes" in (error or "") and "HOME" in (error or ""), error
    assert "stopped" in seen[0]
    home = attack.board.home / "homes" / "default" / str(card)
    assert disk_usage(home) < BUDGET + MARGIN


def test_the_private_tmp_is_bounded_by_the_budget(attack: Attack) -> None:
    """/tmp, /dev and /dev/shm in the sandbox are memory (tmpfs): without a size, a flood
    there takes half the host's RAM. /tmp holds at most the budget, /dev/shm 64 MiB, and /dev
    itself is read-only; the writes past them fail."""
    attack.configure(profile("required"), f"max_workspace_bytes = {BUDGET}")
    # du -x: the tmpfs alone (a checkout under /tmp has this Python bound inside it)
    flood = ("for i in $(seq 1 200); do head -c 1000000 /dev/zero > /tmp/f$i || break; "
             "done; du -sbx /tmp")
    shm = ("head -c 200000000 /dev/zero > /dev/shm/big; du -sb /dev/shm; "
           "echo x > /dev/planted; echo x > /dev/null && echo NULL-OK")
    card, (result, devices) = attack.run([("terminal", {"command": flood, "timeout_s": 300}),
                                          ("terminal", {"command": shm})])
    assert attack.card(card)[0] == "done", attack.card(card)
    assert "No space left on device" in result, result
    held = [int(line.split()[0]) for line in result.splitlines() if line.endswith("\t/tmp")]
    assert held and held[0] <= BUDGET, result
    assert "No space left on device" in devices and "NULL-OK" in devices, devices
    held = [int(line.split()[0]) for line in devices.splitlines()
            if line.endswith("\t/dev/shm")]
    assert held and held[0] <= 64 << 20, devices
    assert "/dev/planted: Read-only file system" in devices, devices


def test_a_command_in_a_full_workspace_is_not_run(attack: Attack) -> None:
    attack.configure(profile("off"), f"max_workspace_bytes = {BUDGET}")
    card = attack.board.add("full", profile="attacker")
    workspace = attack.workspace(card)
    workspace.mkdir(parents=True)
    (workspace / "old").write_bytes(os.urandom(BUDGET + 1_000_000))  # there before
    attack.replay(card, [("terminal", {"command": "echo ran > proof"})])
    assert attack.card(card)[0] == "blocked"
    seen = shown(attack, card)
    assert "not run" in seen[0]
    assert not (workspace / "proof").exists()


def test_write_file_past_the_budget_is_refused_and_blocks(attack: Attack) -> None:
    attack.configure(profile("off"), "max_workspace_bytes = 1100000")
    calls = [("terminal", {"command": "head -c 1000000 /dev/zero > fill"}),
             ("write_file", {"path": "small.txt", "content": "x" * 20_000}),
             ("write_file", {"path": "big.txt", "content": "x" * 100_000})]
    card, _ = attack.run(calls)
    status, error = attack.card(card)
    seen = shown(attack, card)
    assert status == "blocked"
    assert "max_workspace_bytes" in (error or "")
    assert seen[1].startswith("wrote") and seen[2].startswith("not written")
    assert not (attack.workspace(card) / "big.txt").exists()
    assert disk_usage(attack.workspace(card)) <= 1_100_000


# --- credentials out of /proc ----------------------------------------------------------


def _environ_leaks(pid: int, values: tuple[str, ...]) -> list[str]:
    data = Path(f"/proc/{pid}/environ").read_bytes()
    return [v for v in values if v.encode() in data]


def test_the_dispatcher_environment_block_holds_no_credential(attack: Attack,
                                                              tmp_path: Path) -> None:
    """Read as root (the tests' user): non-dumpable alone would not stop root."""
    attack.configure(profile("off"))
    mark, card = marker(), attack.board.add("hold", profile="attacker")
    with LLMServer(responder=once_then_complete(
            ("terminal", {"command": f"sleep {mark}", "timeout_s": 600}))) as server:
        dispatcher = start_dispatcher(attack.board.path, env=attack.canaries.env(server),
                                      log=tmp_path / "dispatcher.log")
        try:
            wait_until(lambda: marked(mark), timeout=60, what="the card's command running")
            leaks = _environ_leaks(dispatcher.pid, attack.canaries.values)
            forkserver = [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(dispatcher.pid)], capture_output=True, text=True
            ).stdout.split()]
            worker = query(attack.board.path, "SELECT pid FROM run WHERE card_id = ?",
                           card)[0][0]
            for pid in [*forkserver, worker]:
                leaks += _environ_leaks(pid, attack.canaries.values)
        finally:
            attack.board.kb.cancel(card)
            kill_all(marked(mark))
            stop(dispatcher)
    assert leaks == []


def test_a_command_reading_every_environ_finds_no_canary(attack: Attack) -> None:
    attack.configure(profile("off"))
    steal = "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | sort -u"
    card, seen = attack.run([("terminal", {"command": steal})])
    assert attack.card(card)[0] == "done"
    assert "PATH=" in seen[0]  # it did read environment blocks
    assert not [v for v in attack.canaries.values if v in seen[0]]
    attack.assert_contained()


def test_the_dispatcher_inside_kanban_swarm_holds_no_credential(attack: Attack) -> None:
    """`kanban swarm --follow` (as `kanban run`) runs its own dispatcher when none serves
    the board: that command's environment block is sealed too."""
    slow = attack.board.script("slow", slow_steps(0.5, 6))
    attack.board.configure(f'[profiles.slow]\nmodel = "{slow}"\n')
    with LLMServer() as server:
        command = subprocess.Popen(
            [*KANBAN, "--db", str(attack.board.path), "swarm", "count", "--part", "a",
             "--profile", "slow", "--follow"], stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=attack.canaries.env(server))
        try:
            wait_until(lambda: query(attack.board.path, "SELECT pid FROM run WHERE pid IS "
                                     "NOT NULL"), timeout=60, what="a worker of the swarm")
            leaks = _environ_leaks(command.pid, attack.canaries.values)
        finally:
            command.wait(timeout=120)
    assert leaks == []
