"""A PostgreSQL board's address may carry its password. Any user of the host can read a
process's command line (/proc/PID/cmdline is not covered by non-dumpable), so the
dispatcher hands the address to its worker forkserver on a pipe, never as an argument."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from kanban.state import DbLocation, open_database
from tests.support.llm_server import LLMServer, text_reply, tool_reply
from tests.support.procs import KANBAN, PATIENT_S, stop, wait_until

CANARY = "pw-" + uuid.uuid4().hex


def descendants(root: int) -> dict[int, bytes]:
    """Every living process under `root`, with its command line."""
    children: dict[int, list[int]] = {}
    lines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            lines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found: dict[int, bytes] = {}
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = lines.get(child, b"")
            todo.append(child)
    return found


@pytest.mark.postgres
def test_no_command_line_shows_the_boards_password(pg_url: str, tmp_path: Path) -> None:
    assert "postgres@" in pg_url
    url = pg_url.replace("postgres@", f"postgres:{CANARY}@", 1)  # trust auth ignores it
    config = tmp_path / "config.toml"
    config.write_text('[profiles.worker]\nmodel = "openai:test-model"\n')
    env = {**os.environ, "KANBAN_DB": url, "KANBAN_CONFIG": str(config)}
    subprocess.run([*KANBAN, "init"], env=env, check=True, capture_output=True)
    subprocess.run([*KANBAN, "add", "show nothing", "--profile", "worker"], env=env,
                   check=True, capture_output=True)
    seen: dict[int, bytes] = {}
    with LLMServer() as server:
        server.enqueue(tool_reply(("kanban_complete", {"summary": "ok"})), text_reply("x"))
        log = open(tmp_path / "d.log", "wb")  # noqa: SIM115 - the child keeps its own copy
        dispatcher = subprocess.Popen([*KANBAN, "dispatch"], env={**env, **server.env()},
                                      stdout=log, stderr=subprocess.STDOUT)
        log.close()
        db = open_database(DbLocation(url, "flag"))
        try:
            def done() -> bool:
                seen.update(descendants(dispatcher.pid))  # the workers while they live
                with db.read() as conn:
                    return conn.scalar("SELECT count(*) FROM card WHERE status = 'done'") == 1

            wait_until(done, timeout=PATIENT_S, what="the card done")
            seen.update(descendants(dispatcher.pid))
        finally:
            db.dispose()
            stop(dispatcher)
    assert any(b"kanban.worker.forkserver" in line for line in seen.values()), seen
    assert not [line for line in seen.values() if CANARY.encode() in line]
