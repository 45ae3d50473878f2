"""The worker forkserver never holds a model credential: a dispatcher given a key hands it
to each worker past the forkserver, and the forkserver's whole memory does not contain it."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from tests.acceptance.conftest import BoardFiles
from tests.support.llm_server import LLMServer, text_reply, tool_reply
from tests.support.pg import skip_or_fail
from tests.support.procs import PATIENT_S, query, start_dispatcher, stop, wait_until

SECRET = "sk-forkserver-" + uuid.uuid4().hex


def forkserver_of(dispatcher_pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == dispatcher_pid and b"kanban.worker.forkserver" in cmdline:
            return int(entry.name)
    return None


def memory_holds(pid: int, needle: bytes) -> bool:
    """Search every readable mapping of a process (needs root or ptrace rights)."""
    found = False
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            match = re.match(r"([0-9a-f]+)-([0-9a-f]+) (r)", line)
            if not match or "[vvar]" in line or "[vsyscall]" in line:
                continue
            start, end = int(match[1], 16), int(match[2], 16)
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            found = found or needle in chunk
    return found


def test_the_forkserver_memory_has_no_credential(board: BoardFiles, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        skip_or_fail("reading another process's memory needs root here")
    board.configure('[profiles.worker]\nmodel = "openai:test-model"\n')
    cards = [board.add(f"card {n}", profile="worker") for n in range(3)]
    with LLMServer() as server:
        for _ in cards:
            server.enqueue(tool_reply(("kanban_complete", {"summary": "ok"})), text_reply("x"))
        env = {**os.environ, **server.env(), "OPENAI_API_KEY": SECRET}
        dispatcher = start_dispatcher(board.path, env=env, log=tmp_path / "d.log")
        try:
            wait_until(lambda: query(board.path, "SELECT count(*) FROM card WHERE status = "
                                                 "'done'")[0][0] == len(cards),
                       timeout=PATIENT_S, what="every card done",
                       explain=lambda: (tmp_path / "d.log").read_text()[-4000:])
            keys = {r.headers.get("authorization", "") for r in server.requests}
            assert keys == {f"Bearer {SECRET}"}  # the workers had the key
            forkserver = wait_until(lambda: forkserver_of(dispatcher.pid), timeout=10,
                                    what="the forkserver")
            assert not memory_holds(forkserver, SECRET.encode())
            assert memory_holds(dispatcher.pid, SECRET.encode())  # the search does find it
        finally:
            stop(dispatcher)
