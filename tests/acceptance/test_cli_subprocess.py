"""The real `kanban` console script, run as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.interrupts import dropped_by_python, in_pythons_startup, last_traceback
from tests.support.pg import skip_or_fail

SCRIPT = Path(sys.executable).with_name("kanban")
KANBAN = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "kanban.cli"]


@pytest.fixture
def console_script() -> None:
    """The installed `kanban` script beside this Python (`make test` installs it)."""
    if not SCRIPT.exists():
        skip_or_fail(f"no console script at {SCRIPT} (pip install -e .)")


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


# Ctrl-C at the n-th import the real console script makes (0: none; the calls, to a file).
AT_THE_NTH_IMPORT = """
import builtins, json, os, signal, sys
script, target, calls_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
calls = []
real = builtins.__import__
def hooked(name, *args, **kwargs):
    calls.append(name)
    if len(calls) == target:
        os.kill(os.getpid(), signal.SIGINT)
    return real(name, *args, **kwargs)
with open(script) as f:
    code = compile(f.read(), script, "exec")
builtins.__import__ = hooked
sys.argv = ["kanban", "--version"]
try:
    exec(code, {"__name__": "__main__"})
finally:
    builtins.__import__ = real
    with open(calls_file, "w") as f:
        json.dump(calls, f)
"""
# The imports before main() can hold Ctrl-C: the script's, and kanban.cli.entry's own
# (`_io` is importlib reading the files; all but `signal` are loaded by then already).
BEFORE_THE_HOLD = {"re", "sys", "kanban.cli.entry", "_io", "__future__", "os", "signal",
                   "types"}


def _interrupted_at(n: int, calls: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", AT_THE_NTH_IMPORT, str(SCRIPT), str(n),
                             str(calls)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.usefixtures("console_script")
def test_ctrl_c_at_any_import_of_the_start_up_exits_130_without_a_traceback(
        tmp_path: Path, env: dict[str, str]) -> None:
    """Every import of the first 60, then every 20th: only those before main()'s first
    line (a handful of modules Python has mostly loaded already) can still raise."""
    first = _interrupted_at(0, tmp_path / "calls0.json", env)
    assert first.communicate(timeout=60)[0] == "kanban 0.1.0\n"
    calls = json.loads((tmp_path / "calls0.json").read_text())
    moments = [*range(1, 61), *range(80, len(calls) + 1, 20)]
    raised = []
    for batch in range(0, len(moments), 4):
        procs = {n: _interrupted_at(n, tmp_path / f"calls{n}.json", env)
                 for n in moments[batch:batch + 4]}
        for n, proc in procs.items():
            out, err = proc.communicate(timeout=60)
            if "Traceback" in err:
                assert err.rstrip().endswith("KeyboardInterrupt"), err
                raised.append(n)
            else:
                assert (proc.returncode, err.strip()) == (130, ""), (n, calls[n - 1], out)
    assert raised == list(range(1, len(raised) + 1))  # only a first few
    assert {calls[n - 1] for n in raised} <= BEFORE_THE_HOLD, [calls[n - 1] for n in raised]


_PACKAGE = Path(__file__).parents[2] / "kanban"
ENTRY_MODULES = tuple(f'File "{path}", line ' for path in (
    _PACKAGE / "__init__.py", _PACKAGE / "cli" / "__init__.py", _PACKAGE / "cli" / "entry.py"))


def _before_main(err: str) -> bool:
    """A KeyboardInterrupt raised before kanban.cli.entry.main began: only module-level
    frames of the script and of the modules it loads to reach main (or Python's dropping
    of it, see tests.support.interrupts)."""
    if dropped_by_python(err):
        return True
    err = last_traceback(err)
    frames = [line.strip() for line in err.splitlines() if line.strip().startswith("File ")]
    ours = [f for f in frames if f.startswith(f'File "{_PACKAGE}')]
    return err.startswith("Traceback") and err.rstrip().endswith("KeyboardInterrupt") and \
        frames[0].startswith(f'File "{SCRIPT}"') and \
        all(f.startswith(ENTRY_MODULES) and f.endswith(", in <module>") for f in ours)


@pytest.mark.usefixtures("console_script")
def test_ctrl_c_right_after_exec_never_prints_kanbans_traceback(tmp_path: Path,
                                                               env: dict[str, str]) -> None:
    """SIGINT at moments spread over `kanban --version` from its exec, until a dozen landed
    in kanban's start-up (exit 130, nothing said). Two windows are left, both before any
    kanban code but module lookups has run: inside Python's own start-up (site and its
    .pth files) Python reports a fatal error; while the script imports kanban.cli.entry
    (its two empty package modules and its own first lines), a KeyboardInterrupt. Neither
    may show a frame of kanban's beyond those modules' top level."""
    def timed() -> float:
        began = time.perf_counter()
        kanban("--version", cwd=tmp_path, env=env)
        return time.perf_counter() - began

    landed, tries, outcomes = 0, 0, set()
    while landed < 12 and tries < 300:
        if tries % 40 == 0:  # each sweep over the start-up as long as it takes now
            whole = timed()
        delay = whole * (tries % 40) / 40
        tries += 1
        proc = subprocess.Popen([*KANBAN, "--version"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        if delay:
            time.sleep(delay)  # the moment is what this test varies
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        outcomes.add(proc.returncode)
        if in_pythons_startup(err) or _before_main(err):
            continue
        assert "Traceback" not in err, err
        assert proc.returncode in (0, 130, -signal.SIGINT), (proc.returncode, err)
        landed += proc.returncode == 130 and out == ""
    assert landed >= 12, (tries, outcomes)


# Ctrl-C inside importlib's module-lock callback, where Python drops a raised exception.
IN_IMPORT_LOCK = """
import signal, sys, time
from kanban.signals import redeliver_outside_imports
heard = []
def handler(signum, frame):
    if not redeliver_outside_imports(signum, frame):
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
    # Raised where the signal came again: the module's sleep, or (on a loaded host, where
    # the main thread had not yet returned from starting the redelivery timer) inside that
    # start; never inside importlib's callback, where it would be dropped.
    assert done.stdout.startswith("raised outside ['"), (done.stdout, done.stderr)
    assert "'cb'" not in done.stdout and "lost" not in done.stdout, done.stdout


# Ctrl-C inside an import: in a class body's `__set_name__`, where Python would wrap it in a
# RuntimeError (a dataclass's field), or in a module that takes long to load.
PLANTED = """
import signal, time
class Field:
    def __set_name__(self, owner, name):
        signal.raise_signal(signal.SIGINT)
class Result:
    usage = Field()
time.sleep(float(__import__("os").environ["IMPORT_S"]))
COMPLETE = True
"""
IMPORTS_PLANTED = """
import signal, sys, time
from kanban.signals import redeliver_outside_imports
def handler(signum, frame):
    if not redeliver_outside_imports(signum, frame):
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, handler)
try:
    import planted
    time.sleep(30)
    print("lost")
except KeyboardInterrupt:
    print("raised after the import" if "planted" in sys.modules else "raised inside it")
except RuntimeError as exc:
    print("disguised:", exc)
"""


@pytest.mark.parametrize(("import_s", "said"), [
    (0.2, "raised after the import"),  # the signal waits for the import to be done
    (30, "raised inside it")])  # but not for ever: kanban.signals.DEFER_AT_MOST_S
def test_ctrl_c_inside_an_import_is_raised_once_it_is_done(
        tmp_path: Path, env: dict[str, str], import_s: float, said: str) -> None:
    (tmp_path / "planted.py").write_text(PLANTED)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", IMPORTS_PLANTED], cwd=tmp_path,
                          env={**env, "IMPORT_S": str(import_s), "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == said, (done.stdout, done.stderr)
    assert time.monotonic() - started < 25  # the long import was cut short


WRAPPED = """
import click
from kanban.cli.app import RootGroup
class Field:
    def __set_name__(self, owner, name):
        raise KeyboardInterrupt  # as a Ctrl-C landing there is raised
@click.command()
def define() -> None:
    class Result:
        usage = Field()
class Root(RootGroup):
    def resolve_command(self, ctx, args):
        return "define", define, args[1:]
Root(name="kanban").main(["define"])
"""


def test_a_ctrl_c_python_wrapped_in_a_runtimeerror_exits_130(tmp_path: Path,
                                                           env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "-c", WRAPPED], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, ""), done.stderr
