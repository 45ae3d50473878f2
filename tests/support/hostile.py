"""Hostile helpers for tests/reliability: forked hammer and crash-writer processes, CLI runs.

The process roles (`hammer`, `crash_writer`) run in children forked from the test process
(`FORK.Process(target=...)`), so they start in milliseconds with kanban already imported;
each opens its own database connection after the fork. Fork before starting any thread.

`run_cli` execs the real `kanban` command. `WarmCli` runs the same entry point,
`kanban.cli.app.main(argv)`, in a fresh process forked from a pre-imported interpreter
(`python -m tests.support.hostile`), for tables of cases where an interpreter start per
case (over a second of imports) would dominate the suite's time.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kanban import comments
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state import DbLocation, open_database
from kanban.tools.scope import WorkerScope

REPO = Path(__file__).resolve().parents[2]
KANBAN = [sys.executable, "-m", "kanban.cli.app"]
FORK = multiprocessing.get_context("fork")
SECRET_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "KANBAN_DB", "KANBAN_BOARD", "KANBAN_DEBUG")
HAMMER_LEASE_S = 120.0  # no lease may expire during a hammer run: every claim is completed
HAMMER_MAX_OPS = 5_000
WRITER_MAX_S = 30.0  # a crash writer is SIGKILLed long before; never let one run on


# --- the real CLI ------------------------------------------------------------------------


@dataclass(frozen=True)
class CliRun:
    """One finished `kanban` subprocess; output decoded leniently (it may echo bad bytes)."""

    args: tuple[str | bytes, ...]
    code: int
    stdout: str
    stderr: str


def clean_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without credentials or kanban settings, with HOME under the test's tmp."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    env |= {"HOME": str(home), "XDG_DATA_HOME": str(home / ".local" / "share")}
    return env | dict(extra or {})


def run_cli(db: Path, *args: str | bytes, env: Mapping[str, str] | None = None,
            prefix: Sequence[str] = (), timeout: float = 60) -> CliRun:
    """`kanban --db DB ARGS...`; bytes arguments reach argv unchanged (invalid UTF-8 too)."""
    command: list[str | bytes] = [*prefix, *KANBAN, "--db", str(db), *args]
    proc = subprocess.run(command, capture_output=True, timeout=timeout,
                          env=dict(os.environ if env is None else env))
    return CliRun(tuple(args), proc.returncode, proc.stdout.decode("utf-8", "replace"),
                  proc.stderr.decode("utf-8", "replace"))


class WarmCli:
    """A pre-imported interpreter forking one child per command (see the module docstring).

    The child gets its own environment, fds 1 and 2 on fresh files and argv exactly as
    the interpreter would decode it (bytes through os.fsdecode: surrogateescape)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        self._lock = threading.Lock()  # one request at a time on the pipe
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.hostile"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, cwd=REPO, env=clean_env(folder, {"PYTHONPATH": str(REPO)}))
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != b"ready\n":
            raise RuntimeError("the warm CLI server did not start")

    def run(self, db: Path, *args: str | bytes, env: Mapping[str, str]) -> CliRun:
        with self._lock:
            return self._run(db, args, env)

    def _run(self, db: Path, args: tuple[str | bytes, ...], env: Mapping[str, str]) -> CliRun:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.count += 1
        out, err = self.folder / f"cli-{self.count}.out", self.folder / f"cli-{self.count}.err"
        argv = ["--db", str(db), *(os.fsdecode(a) for a in args)]
        request = {"argv": argv, "env": dict(env), "out": str(out), "err": str(err)}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError("the warm CLI server died")
        return CliRun(tuple(args), json.loads(reply)["code"],
                      out.read_bytes().decode("utf-8", "replace"),
                      err.read_bytes().decode("utf-8", "replace"))

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def _serve_cli() -> None:
    import kanban.cli.app  # noqa: F401 - the imports every `kanban` start pays, paid once

    protocol = os.fdopen(os.dup(1), "w")
    print("ready", file=protocol, flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _cli_child(request)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), file=protocol,
              flush=True)


def _cli_child(request: dict[str, Any]) -> None:
    code = 70
    try:
        for fd, path in ((1, request["out"]), (2, request["err"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.environ.clear()
        os.environ.update(request["env"])
        from kanban.cli.app import main

        sys.argv = ["kanban", *request["argv"]]
        main(request["argv"])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def clean_error_problem(run: CliRun, *, exit_code: int = 1) -> str | None:
    """Why `run` is not a clean failure (one `kanban: error:` line, the exit code, no
    traceback, not the catch-all for unexpected exceptions), or None."""
    lines = run.stderr.splitlines()
    if run.code != exit_code:
        return f"exit code {run.code}, expected {exit_code}; stderr: {run.stderr!r}"
    if len(lines) != 1 or not lines[0].startswith("kanban: error: "):
        return f"stderr is not one 'kanban: error:' line: {run.stderr!r}"
    if "Traceback" in run.stderr + run.stdout:
        return f"a traceback reached the user: {run.stderr!r}"
    if lines[0].startswith("kanban: error: unexpected "):
        return f"an unhandled exception reached the user: {lines[0]!r}"
    return None


# --- looking at a database file ----------------------------------------------------------


def rows(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """Read with a plain sqlite3 connection (it recovers a WAL left by a killed writer)."""
    with closing(sqlite3.connect(db, timeout=30)) as conn:
        return conn.execute(sql, params).fetchall()


def dump_cards(db: Path) -> list[tuple[Any, ...]]:
    return rows(db, "SELECT * FROM card ORDER BY id")


def integrity(db: Path) -> list[tuple[Any, ...]]:
    return rows(db, "PRAGMA integrity_check")


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- processes -----------------------------------------------------------------------


def proc_environ(pid: int) -> dict[str, str]:
    """The environment `pid` was exec'ed with (a forked child shows its parent's)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


# --- forked process roles ----------------------------------------------------------------


def hammer(db_path: str, seed: int, deadline: float, out_path: str) -> None:
    """Until `deadline` (monotonic): a random mix of API adds, claims (each heartbeated,
    commented through a fenced scope and completed with its token) and board reads.
    Every exception is recorded in the JSON written to `out_path`, never swallowed."""
    rng = random.Random(seed)
    record: dict[str, Any] = {"errors": [], "claims": [], "completed": [], "adds": 0, "reads": 0,
                              "moves": 0}
    db = None
    try:
        db = open_database(DbLocation(db_path, "flag"))
        kb = Kanban(db)
        for op in range(HAMMER_MAX_OPS):
            # Each process makes at least one move, however late it got going: on two busy
            # cores, sixteen processes under a rollback journal have no fair turn-taking,
            # and one that waited out the whole window for its first lock has still done
            # no wrong. What must hold is that its moves succeed, not that it got 5 s' worth.
            if op and time.monotonic() >= deadline:
                break
            try:
                _hammer_once(kb, rng, seed, op, record)
                record["moves"] += 1  # a claim that found no ready card is a move too
            except Exception as exc:  # every failure counts; the run goes on
                record["errors"].append(f"{type(exc).__name__}: {exc}")
    except Exception:
        record["errors"].append(traceback.format_exc())
    finally:
        if db is not None:
            db.dispose()
        Path(out_path).write_text(json.dumps(record))


def _hammer_once(kb: Kanban, rng: random.Random, seed: int, op: int,
                 record: dict[str, Any]) -> None:
    roll = rng.random()
    if roll < 0.25:
        kb.add_card(NewCard(title=f"api {seed}-{op}", priority=rng.randint(-3, 3)))
        record["adds"] += 1
    elif roll < 0.85:
        for claim in kb.claim(rng.randint(1, 3), lease_s=HAMMER_LEASE_S, host=f"hammer-{seed}"):
            record["claims"].append([claim.card_id, claim.attempt, claim.claim_token])
            kb.heartbeat(claim.card_id, claim.claim_token, run_id=claim.run_id,
                         lease_s=HAMMER_LEASE_S, note=f"progress {seed}-{op}")
            scope = WorkerScope(kb, claim.board, claim.card_id, claim.claim_token,
                                claim.run_id, lease_s=HAMMER_LEASE_S)
            with scope.fenced() as conn:
                comments.add_comment(conn, claim.card_id, f"comment {seed}-{op}",
                                     author=scope.actor.name, now=kb.clock(),
                                     board=claim.board)
            kb.complete(claim.card_id, f"done by {seed}", actor=scope.actor)
            record["completed"].append(claim.card_id)
    else:
        kb.board_snapshot("default")
        kb.list_cards(board="default", limit=50)
        record["reads"] += 1


def crash_writer(db_path: str, side_path: str, tag: str, goal_size: int) -> None:
    """Add cards in a tight loop; after each commit returns, append the id to `side_path`
    and fsync it. The test SIGKILLs this process at an arbitrary moment."""
    db = open_database(DbLocation(db_path, "flag"))
    kb = Kanban(db)
    goal = "g" * goal_size  # big rows: the WAL grows and auto-checkpoints get killed too
    fd = os.open(side_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    deadline = time.monotonic() + WRITER_MAX_S
    n = 0
    while time.monotonic() < deadline:
        n += 1
        card = kb.add_card(NewCard(title=f"{tag} {n}", goal=goal))
        os.write(fd, f"{card.id}\n".encode())
        os.fsync(fd)


def committed_ids(side_path: Path) -> list[int]:
    """Ids a writer recorded as committed (a torn last line, if any, is not a record)."""
    try:
        text = side_path.read_text()
    except FileNotFoundError:
        return []
    return [int(line) for line in text.split("\n")[:-1] if line]


if __name__ == "__main__":
    _serve_cli()
