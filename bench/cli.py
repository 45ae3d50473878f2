"""Row 5: each everyday command's wall time against its floor, at 10k and 100k cards.

The floor of a command is a bare interpreter that imports sqlite3 and runs that command's
main queries on the same file (`python -c "import sqlite3; ..."`): no command can start
and answer faster. Commands and floors alternate in one loop, so drift hits both; the
ratio (command / floor) is the number that matters on a shared machine. Goal: ≤ 5x.

The commands run from a regular (non-editable) install in a private venv when one can be
built offline, as a user's `pip install .` or `pipx install .` would; else from this
venv's console script (an editable install adds about 10 ms of import hooks). The note
says which. Optional row 5.h: `hermes kanban list` against `kanban list` on 10k cards,
when `hermes` (the hermes-agent package) is on PATH or $HERMES_BIN.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bench.common import MIX, Sizes, bench_env, fill_cards, median, new_board, query, status_of
from bench.hermes import seed_hermes
from bench.report import Goal, Row

GOAL = Goal("ratio", "<=", 5)

# The queries each command's floor runs: the same ones the command needs to answer.
_LIST = ("SELECT * FROM card WHERE board = 'default' AND archived_at IS NULL "
         "ORDER BY id DESC LIMIT 50",
         "SELECT count(*) FROM card WHERE board = 'default' AND archived_at IS NULL")
_COUNTS = ("SELECT status, sum(n) FROM card_count WHERE board = 'default' "  # kept by triggers
           "GROUP BY status")
_BOARD = (_COUNTS, *(f"SELECT * FROM card c LEFT JOIN run r ON r.card_id = c.id AND "
                     f"r.claim_token = c.claim_token WHERE c.board = 'default' AND "
                     f"c.status = '{s}' AND c.archived_at IS NULL ORDER BY c.priority DESC, "
                     f"c.id LIMIT 10" for s, _ in MIX))
_SHOW = ("SELECT * FROM card WHERE id = {id}", "SELECT * FROM dependency WHERE card_id = {id}",
         "SELECT * FROM run WHERE card_id = {id}", "SELECT * FROM event WHERE card_id = {id}",
         "SELECT * FROM comment WHERE card_id = {id}")
_STATUS = (_COUNTS, "SELECT * FROM dispatcher WHERE stopped_at IS NULL",
           "SELECT * FROM card c JOIN run r ON r.card_id = c.id WHERE c.status = 'running'")
_ADD = ("BEGIN IMMEDIATE", "INSERT INTO card (board, title, goal, context, status, priority, "
        "profile, depth, created_by, attempt, max_attempts, retry_base, run_after, created_at, "
        "updated_at, input_tokens, output_tokens, cached_tokens) VALUES ('default', 'floor', "
        "'', '', 'ready', 0, 'default', 0, 'user', 0, 3, 0, '2025-01-01 00:00:00.000000', "
        "'2025-01-01 00:00:00.000000', '2025-01-01 00:00:00.000000', 0, 0, 0)", "COMMIT")

COMMANDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "--help": (["--help"], ()),
    "board": (["board"], _BOARD),
    "list": (["list"], _LIST),
    "show": (["show", "{id}"], _SHOW),
    "add": (["add", "bench card"], _ADD),
    "status": (["status"], _STATUS),
}


def build(path: Path, cards: int) -> None:
    new_board(path)
    fill_cards(path, cards, status_of=status_of)
    conn_rows = query(path, "SELECT id FROM card WHERE status = 'running'")
    if conn_rows:
        conn = sqlite3.connect(path)
        with conn:
            conn.executemany(
                "UPDATE card SET claim_token = 'tok' || id, attempt = 1 WHERE id = ?", conn_rows)
            conn.executemany(
                "INSERT INTO run (card_id, attempt, claim_token, started_at, heartbeat_at, "
                "progress, input_tokens, output_tokens, cached_tokens) "
                "SELECT id, 1, 'tok' || id, created_at, created_at, 'working', 0, 0, 0 "
                "FROM card WHERE id = ?", conn_rows)
        conn.close()


def floor_command(path: Path, sql: tuple[str, ...]) -> list[str]:
    """`python -c "import sqlite3; ..."`: open the file, run the queries, print the rows."""
    statements = "".join(f"print(c.execute({s!r}).fetchall());" for s in sql)
    code = (f"import sqlite3; c = sqlite3.connect({str(path)!r}, isolation_level=None); "
            f"{statements}")
    return [sys.executable, "-c", code]


def wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, env=env, timeout=120, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)[:200]} exited {done.returncode}: "
                           f"{done.stderr.decode()[-500:]}")
    return elapsed


def installed_kanban(work: Path) -> tuple[list[str], str]:
    """A regular install of this checkout in a private venv (offline); else this venv's
    console script."""
    from bench.install import regular_install

    try:
        venv = regular_install(work / "install")
        return [str(venv / "bin" / "kanban")], "a regular install (pip install .) in a venv"
    except (subprocess.SubprocessError, OSError, ValueError):
        fallback = Path(sys.executable).parent / "kanban"
        return [str(fallback)], "this venv's console script (editable install)"


def run(sizes: Sizes, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    kanban, how = installed_kanban(work) if sizes.name != "smoke" else (
        [str(Path(sys.executable).parent / "kanban")], "this venv's console script")
    env = bench_env(COLUMNS="120")
    rows: list[Row] = []
    for n, cards in enumerate(sizes.cli_cards, start=1):
        path = work / f"board-{cards}" / "kanban.db"
        build(path, cards)
        middle = str(max(1, cards // 2))
        times = side_by_side(kanban, path, middle, env, sizes.cli_repeats)
        for m, (name, (ours, floor)) in enumerate(times.items(), start=1):
            rows.append(Row(
                f"5.{n}.{m}", f"`kanban {name}` wall time, {cards:,} cards", "ms",
                median(ours) * 1000, median(floor) * 1000,
                "python -c 'import sqlite3' + the same queries", GOAL,
                f"median of {len(ours)} runs each, alternating; kanban from {how}"
                if (n, m) == (1, 1) else ""))
    rows += hermes_rows(sizes, work, kanban, env)
    return rows


def side_by_side(kanban: list[str], path: Path, card_id: str, env: dict[str, str],
                 repeats: int) -> dict[str, tuple[list[float], list[float]]]:
    """Each command and its floor, alternating, `repeats` times (after one unmeasured warm-up
    of each, which pays for cold disk caches)."""
    def fill(parts: list[str] | tuple[str, ...]) -> list[str]:
        return [p.replace("{id}", card_id) for p in parts]

    plans = {name: ([*kanban, "--db", str(path), *fill(args)],
                    floor_command(path, tuple(fill(sql))))
             for name, (args, sql) in COMMANDS.items()}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in plans}
    for round_ in range(repeats + 1):
        for name, (ours, floor) in plans.items():
            a, b = wall(ours, env), wall(floor, env)
            if round_:
                times[name][0].append(a)
                times[name][1].append(b)
    return times


# -- the optional Hermes comparison -------------------------------------------------------------


def hermes_binary() -> str | None:
    return os.environ.get("HERMES_BIN") or shutil.which("hermes")


def hermes_rows(sizes: Sizes, work: Path, kanban: list[str], env: dict[str, str]) -> list[Row]:
    """`hermes kanban list` vs `kanban list`, 10k cards each; skipped without hermes."""
    hermes = hermes_binary()
    if hermes is None or sizes.name == "smoke":
        return []

    cards = 10_000
    home = work / "hermes-home"
    seed_hermes(hermes, home, cards)
    ours = work / f"board-{cards}" / "kanban.db"
    if not ours.exists():
        build(ours, cards)
    hermes_env = {**env, "HERMES_HOME": str(home)}
    theirs = [hermes, "kanban", "list"]
    rows = []
    for key, args, what in (("5.h.1", ["list"], "`kanban list` (newest 50)"),
                            ("5.h.2", ["list", "--all"], "`kanban list --all` (every card)")):
        ours_cmd = [*kanban, "--db", str(ours), *args]
        a: list[float] = []
        b: list[float] = []
        for round_ in range(sizes.cli_repeats + 1):
            x, y = wall(ours_cmd, env), wall(theirs, hermes_env)
            if round_:
                a.append(x)
                b.append(y)
        rows.append(Row(key, f"{what} vs `hermes kanban list` (every card), {cards:,} cards",
                        "ms", median(a) * 1000, median(b) * 1000,
                        "hermes kanban list (hermes-agent)", None,
                        f"median of {len(a)} runs each, alternating" if key == "5.h.1" else ""))
    return rows
