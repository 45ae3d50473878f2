"""A busy database is never fatal: a dispatcher with eight workers, three processes adding
cards through the CLI and one process that keeps taking SQLite's write lock for 300 ms.

Every process lives to the end, every card is done exactly once, the file is intact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.conftest import BoardFiles
from tests.support.procs import KANBAN, PATIENT_S, query, start_dispatcher, stop, wait_until

ADDERS = 3
CARDS_PER_ADDER = 15
HOLD_S = 0.3

# Holds the write lock for HOLD_S, lets go briefly, again, until its stop file appears.
LOCK_HOLDER = """
import pathlib, sqlite3, sys, time
db, stop_file, hold = sys.argv[1], pathlib.Path(sys.argv[2]), float(sys.argv[3])
conn = sqlite3.connect(db, timeout=60, isolation_level=None)
held = 0
while not stop_file.exists():
    conn.execute("BEGIN IMMEDIATE")
    time.sleep(hold)
    conn.execute("COMMIT")
    held += 1
    time.sleep(0.02)
print(held)
"""

# One `kanban add` after another: each is its own CLI process and its own write.
ADDER = """
import subprocess, sys
db, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    subprocess.run([*sys.argv[4:], "--db", db, "add", f"{who}-{i}"], check=True,
                   stdout=subprocess.DEVNULL)
"""


@pytest.mark.slow
def test_busy_lock_holder_beside_a_dispatcher_and_adders(board: BoardFiles,
                                                        tmp_path: Path) -> None:
    spec = board.script("quick", [{"tool_calls": [
        {"name": "kanban_complete", "arguments": {"summary": "ok"}}]}])
    board.configure(f'[profiles.default]\nmodel = "{spec}"\n')
    stop_file = tmp_path / "stop-holding"
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(board.path),
                               str(stop_file), str(HOLD_S)], stdout=subprocess.PIPE, text=True)
    log = tmp_path / "dispatcher.log"
    dispatcher = start_dispatcher(board.path, "--max-workers", "8", log=log)
    adders = [subprocess.Popen([sys.executable, "-c", ADDER, str(board.path), f"adder{n}",
                                str(CARDS_PER_ADDER), *KANBAN], stderr=subprocess.PIPE,
                               text=True)
              for n in range(ADDERS)]
    total = ADDERS * CARDS_PER_ADDER
    try:
        for adder in adders:
            _, err = adder.communicate(timeout=PATIENT_S)
            assert adder.returncode == 0, err
        wait_until(lambda: query(board.path, "SELECT count(*) FROM card WHERE status = 'done'")
                   == [(total,)], timeout=PATIENT_S, what=f"{total} cards done", interval=0.2)
        assert dispatcher.poll() is None, log.read_text()
    finally:
        stop_file.touch()
        held = holder.communicate(timeout=30)[0]
        code = stop(dispatcher)
    assert code == 0, log.read_text()
    assert int(held) > 3, "the lock holder barely ran"
    assert query(board.path, "SELECT count(*) FROM card") == [(total,)]
    completed = query(board.path, "SELECT card_id, count(*) FROM run WHERE outcome = "
                      "'completed' GROUP BY card_id")
    assert len(completed) == total and {n for _, n in completed} == {1}
    assert query(board.path, "SELECT count(*) FROM run WHERE outcome IS NOT 'completed'") \
        == [(0,)]
    assert query(board.path, "PRAGMA integrity_check") == [("ok",)]
    assert "Traceback" not in log.read_text()


# A pre_tool hook that, on the first attempt only, takes the write lock and stops its own
# worker: a frozen process holding SQLite's write lock (as a SIGSTOP mid-write leaves it).
FREEZER = '''
import os, signal, sqlite3
from pathlib import Path

MARK = Path(MARK_PATH)


def freeze(event):
    if event.call.name != "kanban_show" or MARK.exists():
        return None
    MARK.write_text(str(os.getpid()))
    conn = sqlite3.connect(os.environ["KANBAN_DB"], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    os.kill(os.getpid(), signal.SIGSTOP)
    return None
'''


def test_a_worker_frozen_holding_the_write_lock_is_killed_and_its_card_runs_again(
        board: BoardFiles, tmp_path: Path) -> None:
    """The dispatcher's own writes meet the lock while the lease still runs (a 3 s lease,
    1 s ticks): each gives up after a short wait instead of 30 s and a fatal error, and the
    rescue, which needs no write to kill, frees the lock."""
    folder = tmp_path / "hookmods"
    folder.mkdir()
    mark = tmp_path / "frozen-pid"
    (folder / "freezer.py").write_text(FREEZER.replace("MARK_PATH", repr(str(mark))))
    spec = board.script("two-steps", [
        {"tool_calls": [{"name": "kanban_show", "arguments": {}}]},
        {"tool_calls": [{"name": "kanban_complete", "arguments": {"summary": "ok"}}]}])
    board.configure(f'[limits]\nlease_s = 3.0\n[profiles.default]\nmodel = "{spec}"\n'
                    '[hooks]\npre_tool = ["freezer:freeze"]\n')
    card = board.add("freezes holding the lock")
    log = tmp_path / "dispatcher.log"
    dispatcher = start_dispatcher(board.path, "--max-workers", "1", log=log,
                                  env={**os.environ, "PYTHONPATH": str(folder)})
    try:
        wait_until(mark.exists, timeout=60, what="the worker frozen with the lock")
        wait_until(lambda: query(board.path, "SELECT status FROM card WHERE id = ?", card)
                   == [("done",)], timeout=60, what="the card done on its second attempt",
                   interval=0.2)
        assert dispatcher.poll() is None, log.read_text()
    finally:
        code = stop(dispatcher)
    assert code == 0, log.read_text()
    outcomes = query(board.path, "SELECT outcome FROM run WHERE card_id = ? ORDER BY id", card)
    assert outcomes == [("lease_lost",), ("completed",)]
    assert not Path(f"/proc/{mark.read_text()}").exists()
    assert "Traceback" not in log.read_text()
