"""`kanban run` stopped by Ctrl-C at any moment of its first seconds: the board stays true.

On each of a few boards side by side, each run is interrupted at a moment of its first
seconds: some counted from the process's start (its imports, its dispatcher's start, the
lead's claim), most from the moment the lead's card exists (before, during or after the
lead's model calls, its delegate call and its children). The next run starts at once, so
each run is also "the run started right after an interrupt". Then one run goes to its end
and every interrupted lead is resumed with --resume. Nothing may be handed to a dead
dispatcher, no interrupt may spend an attempt, and --resume must say what it waits for.
The lead and its children are scripted (fast), to keep the test's time bounded on a busy
machine.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import kanban.cli
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from tests.acceptance.conftest import BoardFiles
from tests.support.interrupts import dropped_by_python, in_pythons_startup, last_traceback
from tests.support.procs import KANBAN, query, wait_until

MOMENTS = 20  # after the lead's card exists
BOARDS = 4  # chains of (MOMENTS + EARLY) / BOARDS interrupts, side by side
WINDOW_S = 2.5  # after the lead's card exists: its model calls, delegate, children
EARLY = 8  # counted from the process's start, before its lead's card may exist
EARLY_WINDOW_S = 1.5
SAY_WITHIN_S = 2.0  # --resume says what it waits for within this long
ANSWER = "ANSWER: the journal modes compared"
# What loads before kanban.cli.entry.main can take the signal: `python -m kanban.cli`, the
# entry module's own imports
_CLI = Path(kanban.cli.__file__).parent
SOURCE = str(_CLI.parents[1])  # the source tree (its venv, if inside, is sys.prefix)
BEFORE_MAIN = tuple(f'File "{path}", line ' for path in (
    _CLI / "__main__.py", _CLI / "entry.py", _CLI / "__init__.py", _CLI.parent / "__init__.py",
    _CLI.parent / "signals.py"))


def _scripts(board: BoardFiles) -> str:
    child = board.script("child", [{"tool_calls": [{"name": "kanban_complete", "arguments": {
        "summary": "part done"}}], "delay_s": 0.1}])
    board.configure(f'[profiles.default]\nmodel = "{child}"\n')
    tasks = [{"title": "alpha", "goal": "a"}, {"title": "beta", "goal": "b"}]
    return board.script("lead", [
        {"tool_calls": [{"name": "delegate", "arguments": {"tasks": tasks}}], "delay_s": 0.3},
        {"text": ANSWER, "delay_s": 0.2}])


def _start(board: BoardFiles, *args: str) -> subprocess.Popen[str]:
    # A suite started in the background inherits SIGINT ignored; this one must feel it.
    return subprocess.Popen([*KANBAN, "--db", str(board.path), "run", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _leads(board: BoardFiles) -> int:
    return query(board.path, "SELECT count(*) FROM card WHERE created_by = 'lead'")[0][0]


def _interrupt(board: BoardFiles, spec: str, moment: tuple[str, float]) -> list[str]:
    """One run, interrupted some seconds after its start or after its lead's card appeared."""
    anchor, after = moment
    before = _leads(board)
    proc = _start(board, "A goal", "--model", spec)
    if anchor == "lead":
        wait_until(lambda: _leads(board) > before or proc.poll() is not None, timeout=60,
                   what="the lead's card")
    time.sleep(after)  # the moment itself is what this test varies
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    problems = []
    # -SIGINT: the signal came as the interpreter was exiting, its work done. Python's own
    # start-up (its streams, site and the .pth files) runs before any of kanban's code, and
    # Python reports a signal there itself: that one is Python's message, not kanban's.
    pythons = in_pythons_startup(err) or _before_kanbans_code(last_traceback(err)) or \
        dropped_by_python(err)
    if not pythons and (proc.returncode not in (0, 130, -signal.SIGINT) or "Traceback" in err):
        problems.append(f"exited {proc.returncode}: {err}")
    running = query(board.path, "SELECT id FROM card WHERE created_by = 'lead' AND "
                                "status = 'running'")
    if running:
        problems.append(f"lead(s) {running} left running\n{err[-3000:]}")
    open_rows = query(board.path, "SELECT id, pid FROM dispatcher WHERE stopped_at IS NULL")
    if open_rows:
        problems.append(f"dispatcher rows left open: {open_rows}")
    return [f"{after:.2f}s after the {anchor} (exit {proc.returncode}): {p}" for p in problems]


def _before_kanbans_code(err: str) -> bool:
    """A KeyboardInterrupt raised while Python found and loaded kanban's entry module (only
    runpy's, importlib's and the standard library's frames, and module-level imports of the
    entry's modules), before its main() could take the signal: nothing of the board is
    touched yet."""
    ours = [line.strip() for line in err.splitlines()
            if line.strip().startswith(f'File "{SOURCE}') and sys.prefix not in line]
    return err.startswith("Traceback") and err.rstrip().endswith("KeyboardInterrupt") and \
        all(line.startswith(BEFORE_MAIN) and line.endswith(", in <module>") for line in ours)


def _resume(board: BoardFiles, lead: int) -> tuple[int, str, float]:
    """--resume; its exit code, its stdout, and how long after saying it resumes it first
    said what it waits for (or ended)."""
    proc = subprocess.Popen([*KANBAN, "--db", str(board.path), "run", "--resume", str(lead)],
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    heard: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        heard.extend((time.monotonic(), line) for line in proc.stderr)

    with proc:
        reader = threading.Thread(target=read)
        reader.start()
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.wait(timeout=60)
        reader.join()
    ended = time.monotonic()
    begun = next((t for t, line in heard if "resuming" in line), None)
    assert begun is not None, "".join(line for _, line in heard)
    said = next((t for t, line in heard if line.startswith("waiting:")), ended)
    return proc.returncode, out, said - begun


@pytest.fixture
def boards(tmp_path: Path) -> Iterator[list[BoardFiles]]:
    made = []
    for i in range(BOARDS):
        (tmp_path / f"b{i}").mkdir()
        db = open_database(DbLocation(str(tmp_path / f"b{i}" / "kanban.db"), "flag"),
                           create=True)
        Kanban(db).ensure_board("default")
        made.append(BoardFiles(tmp_path / f"b{i}" / "kanban.db", Kanban(db)))
    yield made
    for board in made:
        board.kb.db.dispose()


def test_ctrl_c_at_any_moment_leaves_a_board_that_resumes(boards: list[BoardFiles]) -> None:
    # A failure names its seed; KANBAN_INTERRUPT_SEED=<seed> replays the same moments.
    seed = int(os.environ.get("KANBAN_INTERRUPT_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    moments = [("lead", at) for at in _spread(rng, MOMENTS, WINDOW_S)]
    moments += [("start", at) for at in _spread(rng, EARLY, EARLY_WINDOW_S)]
    rng.shuffle(moments)
    per_board = [moments[i::BOARDS] for i in range(BOARDS)]
    with ThreadPoolExecutor(BOARDS) as pool:
        found = list(pool.map(_chain, boards, per_board))
    problems = [p for board_problems in found for p in board_problems]
    assert not problems, f"seed {seed} (KANBAN_INTERRUPT_SEED={seed} replays it):\n" + \
        "\n".join(problems)


def _spread(rng: random.Random, count: int, window: float) -> list[float]:
    """`count` random moments of `window`, one in each of its equal slices."""
    slot = window / count
    return [i * slot + rng.uniform(0, slot) for i in range(count)]


def _chain(board: BoardFiles, moments: list[tuple[str, float]]) -> list[str]:
    """Interrupt a run at each moment, start the next at once; then a whole run, then
    --resume every lead left unfinished."""
    spec = _scripts(board)
    problems = []
    for moment in moments:
        problems += _interrupt(board, spec, moment)
    last = _start(board, "A goal", "--model", spec)
    out, err = last.communicate(timeout=60)
    if last.returncode != 0 or ANSWER not in out:
        problems.append(f"the run after the interrupts exited {last.returncode}: {err}")
    for (lead,) in query(board.path, "SELECT id FROM card WHERE created_by = 'lead' AND "
                                     "status != 'done' ORDER BY id"):
        code, answer, silent = _resume(board, lead)
        if code != 0 or ANSWER not in answer:
            problems.append(f"--resume {lead} exited {code}: {answer}")
        if silent > SAY_WITHIN_S:
            problems.append(f"--resume {lead} said nothing for {silent:.1f}s")
    return problems + _board_is_true(board.path)


def _board_is_true(db: Path) -> list[str]:
    problems = []
    for card_id, by, status, spent, error in query(
            db, "SELECT id, created_by, status, attempt - retry_base, error FROM card"):
        if status != "done":
            problems.append(f"#{card_id} ({by}) is {status}: {error}")
        elif spent != 1:
            problems.append(f"#{card_id} ({by}) spent {spent} attempts")
    if query(db, "SELECT count(*) FROM event WHERE data LIKE '%no live dispatcher%'")[0][0]:
        problems.append("a child was cancelled for want of a dispatcher")
    return problems


def test_resume_takes_over_at_once_from_a_run_killed_outright(boards: list[BoardFiles]) -> None:
    """SIGKILL (no handler runs): the dispatcher row stays open and the lead `running` under
    a dead pid. `--resume` takes the lead over at once (not when its lease lapses), says what
    it waits for, and the lead ends done with one attempt spent."""
    board = boards[0]
    spec = _scripts(board)
    lease = 600  # a takeover that waited for the lease would time this test out
    board.configure(board.home.joinpath("config.toml").read_text()
                    + f"[limits]\nlease_s = {lease}\n")
    proc = _start(board, "A goal", "--model", spec)
    lead = wait_until(lambda: query(board.path, "SELECT c.id FROM card c, dispatcher d WHERE "
                                                "c.created_by = 'lead' AND c.status = "
                                                "'running' AND d.stopped_at IS NULL"),
                      timeout=60, what="the lead running beside its dispatcher")[0][0]
    proc.kill()
    proc.communicate(timeout=60)
    assert query(board.path, "SELECT count(*) FROM dispatcher WHERE stopped_at IS NULL") == [
        (1,)]  # the row of a dead process
    started = time.monotonic()
    code, answer, silent = _resume(board, lead)
    assert code == 0 and ANSWER in answer
    assert silent <= SAY_WITHIN_S
    assert time.monotonic() - started < lease / 2
    assert _board_is_true(board.path) == []
