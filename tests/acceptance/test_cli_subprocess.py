"""The real `kanban` console script, run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kanban")
KANBAN = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kanban.cli"]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The parent environment minus kanban settings, with a throwaway home."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("KANBAN_")}
    clean.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "home" / "data"),
                 COLUMNS="80", NO_COLOR="1")
    return clean


def kanban(*args: str, cwd: Path, env: dict[str, str],
           command: list[str] = KANBAN) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def ok(*args: str, cwd: Path, env: dict[str, str]) -> str:
    done = kanban(*args, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def test_round_trip(tmp_path: Path, env: dict[str, str]) -> None:
    assert "created at" in ok("init", cwd=tmp_path, env=env)
    assert (tmp_path / ".kanban" / "kanban.db").exists()
    assert ok("add", "Write the parser", "--priority", "5", cwd=tmp_path, env=env) == "#1\n"
    assert ok("add", "Test the parser", cwd=tmp_path, env=env) == "#2\n"
    assert ok("link", "2", "1", cwd=tmp_path, env=env) == "#2 now depends on #1\n"
    assert ok("complete", "1", "--summary", "parser done", cwd=tmp_path,
              env=env) == "#1 is done\n"
    board = ok("board", cwd=tmp_path, env=env)
    assert board.splitlines()[0] == "board default · 2 cards · no dispatcher"
    assert all(len(line) <= 80 for line in board.splitlines())
    detail = json.loads(ok("show", "2", "--json", cwd=tmp_path, env=env))
    assert detail["card"]["status"] == "ready"  # promoted when #1 completed
    assert detail["depends_on"] == [{"id": 1, "title": "Write the parser", "status": "done",
                                     "result": "parser done"}]


def test_list_says_why_a_card_is_blocked(tmp_path: Path, env: dict[str, str]) -> None:
    ok("init", cwd=tmp_path, env=env)
    ok("add", "Pick a database", cwd=tmp_path, env=env)
    ok("block", "1", "which database: sqlite or postgres?", cwd=tmp_path, env=env)
    assert ok("list", "--status", "blocked", cwd=tmp_path, env=env).endswith(
        "  Pick a database  — which database: sqlite or postgres?\n")
    listed = json.loads(ok("list", "--status", "blocked", "--json", cwd=tmp_path, env=env))
    assert [c["error"] for c in listed["cards"]] == ["which database: sqlite or postgres?"]


def test_error_is_one_line_without_traceback(tmp_path: Path, env: dict[str, str]) -> None:
    module = [sys.executable, "-m", "kanban.cli.app"]
    done = kanban("--db", str(tmp_path / "missing.db"), "show", "1", cwd=tmp_path, env=env,
                  command=module)
    assert done.returncode == 1
    missing = tmp_path / "missing.db"
    assert done.stderr == (f"kanban: error: no kanban database at {missing} (from --db): "
                           f"create it with `kanban --db {missing} init`\n")
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "missing.db").exists()


def test_cli_import_stays_light(env: dict[str, str], tmp_path: Path) -> None:
    heavy = ("openai", "anthropic", "kanban.agent", "kanban.dispatcher", "kanban.worker",
             "kanban.tools", "httpx", "rich", "sqlalchemy", "sqlmodel", "pydantic")
    probe = ("import sys, kanban.cli.app; "
             f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# Ctrl-C arrives while a module loads: here, as the console script's entry imports click.
INTERRUPTED_LOAD = """
import builtins, os, signal, sys
import kanban.cli.entry
real = builtins.__import__
def hooked(name, *args, **kwargs):
    if name == "click":
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *args, **kwargs)
builtins.__import__ = hooked
sys.argv = ["kanban", "--version"]
kanban.cli.entry.main()
"""


def test_ctrl_c_while_the_command_loads_exits_130_without_a_traceback(
        tmp_path: Path, env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_LOAD], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (130, "", "")


# Ctrl-C inside importlib's module-lock callback, where Python drops a raised exception.
IN_IMPORT_LOCK = """
import signal, sys, time
from kanban.signals import redeliver_outside_import_lock
heard = []
def handler(signum, frame):
    if not redeliver_outside_import_lock(signum, frame):
        heard.append(frame.f_code.co_name)
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, handler)
scope = {"signal": signal}
exec(compile("def cb():\\n    signal.raise_signal(signal.SIGINT)\\n    return 1\\n",
             "<frozen importlib._bootstrap>", "exec"), scope)
try:
    scope["cb"]()
    time.sleep(30)
    print("lost")
except KeyboardInterrupt:
    print("raised outside", heard)
"""


def test_ctrl_c_in_importlibs_lock_callback_is_raised_after_it(tmp_path: Path,
                                                               env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", IN_IMPORT_LOCK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "raised outside ['<module>']", done.stderr
