"""A process of the same user as the dispatcher (an unsandboxed command, or anything else
the user runs) reading the credentials of kanban's own processes through /proc: the
dispatcher, its forkserver and the worker are non-dumpable, so their environment blocks
and memory are closed to it, while the card's own command (dumpable) stays readable.

The tests run as root; the dispatcher and the reader run as root without any capability
(as an ordinary account is), so only dumpability decides what the reader may open.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

from kanban.state.errors import KanbanError
from tests.security.conftest import Attack
from tests.security.test_process_escape import kill_all, marked, marker, once_then_complete
from tests.support.llm_server import LLMServer
from tests.support.pg import skip_or_fail
from tests.support.procs import KANBAN, query, stop, wait_until

CAPLESS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
READ = """
import sys
for path in sys.argv[1:]:
    try:
        f = open(path, "rb")
    except OSError as exc:
        print(path, "refused", exc.errno)
        continue
    try:
        data = f.read(1 << 20)  # /proc/PID/mem opens but reads nothing at offset 0
    except OSError:
        data = b""
    f.close()
    print(path, "read", data.decode("latin-1").replace("\\0", " ").replace("\\n", " "))
"""


def read_capless(paths: list[str]) -> dict[str, str]:
    """Each path as a capability-less process of the same user reads it: its text (empty
    when it opens but reads nothing), or 'refused' when it does not open."""
    out = subprocess.run([*CAPLESS, sys.executable, "-c", READ, *paths], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    found = {}
    for line in out.splitlines():
        path, verdict, *rest = line.split(" ", 2)
        found[path] = " ".join(rest) if verdict == "read" else "refused"
    return found


@pytest.fixture
def capless() -> None:
    probe = subprocess.run([*CAPLESS, "true"], capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        skip_or_fail("setpriv cannot drop capabilities here")


@pytest.mark.usefixtures("capless")
def test_a_same_user_process_reads_no_credential_of_kanbans_processes(
        attack: Attack, tmp_path: Path) -> None:
    attack.configure('toolsets = ["kanban", "terminal"]\napproval = "allow"\nsandbox = "off"')
    mark, card = marker(), attack.board.add("hold", profile="attacker")
    with LLMServer(responder=once_then_complete(
            ("terminal", {"command": f"sleep {mark}", "timeout_s": 600}))) as server, \
            open(tmp_path / "dispatcher.log", "wb") as log:
        dispatcher = subprocess.Popen(
            [*CAPLESS, *KANBAN, "--db", str(attack.board.path), "dispatch"], stdout=log,
            stderr=subprocess.STDOUT, env=attack.canaries.env(server))
        try:
            command = wait_until(lambda: marked(mark, b"sleep"), timeout=60,
                                 what="the card's command running")[0]
            worker = query(attack.board.path, "SELECT pid FROM run WHERE card_id = ?",
                           card)[0][0]
            forkservers = [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(dispatcher.pid)], capture_output=True, text=True
            ).stdout.split() if int(p) != worker]
            kanbans = [dispatcher.pid, *forkservers, worker]
            seen = read_capless([f"/proc/{pid}/{what}" for pid in [*kanbans, command]
                                 for what in ("environ", "mem", "cmdline")])
        finally:
            try:
                with suppress(KanbanError):  # a card that failed is over already
                    attack.board.kb.cancel(card)
                kill_all(marked(mark))
            finally:
                stop(dispatcher)
    assert forkservers, "no forkserver found"
    for pid in kanbans:
        assert seen[f"/proc/{pid}/environ"] == "refused", (pid, seen)
        assert seen[f"/proc/{pid}/mem"] == "refused", (pid, seen)
    # the reader could open a dumpable process's environment and memory
    assert "PATH=" in seen[f"/proc/{command}/environ"]
    assert seen[f"/proc/{command}/mem"] != "refused"
    leaks = [path for path, text in seen.items()
             for value in attack.canaries.values if value in text]
    assert leaks == []
    attack.assert_contained()
