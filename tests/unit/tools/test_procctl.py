"""What a process says about itself to the kernel: credentials out of its environment
block, adopted daemons killed. Each case runs in a child interpreter, since both change the
process for good."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kanban.tools.runner import CommandSpec, PlainRunner
from tests.support.pg import skip_or_fail


@pytest.fixture(autouse=True)
def _linux() -> None:
    """prctl and /proc are Linux's; elsewhere skip, but fail under CI=true."""
    if not Path("/proc/self/stat").exists():
        skip_or_fail("needs Linux (/proc, prctl)")


def python(code: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60, env=env, check=True)
    return done.stdout


def test_sealed_credentials_leave_the_block_and_the_children_but_not_os_environ() -> None:
    out = python("""
        import os, subprocess
        from pathlib import Path
        from kanban.tools.procctl import seal_environment
        from kanban.tools.workbench import is_credential
        seal_environment(os.environ, is_credential)
        print("block:", b"sk-canary" in Path("/proc/self/environ").read_bytes())
        print("aws:", b"aws-canary" in Path("/proc/self/environ").read_bytes())
        print("kept:", os.environ["OPENAI_API_KEY"], os.environ["PLAIN"])
        env = subprocess.run(["env"], capture_output=True, text=True).stdout
        print("child:", env.count("canary"))
        print("plain:", b"PLAIN=stays" in Path("/proc/self/environ").read_bytes())
    """, env={**os.environ, "OPENAI_API_KEY": "sk-canary-1",
              "AWS_SECRET_ACCESS_KEY": "aws-canary-2", "PLAIN": "stays"})
    assert out.splitlines() == ["block: False", "aws: False", "kept: sk-canary-1 stays",
                                "child: 0", "plain: True"]


def test_a_subreaper_running_a_command_kills_what_it_left_behind(tmp_path: Path) -> None:
    mark = f"300{os.getpid()}{int(time.monotonic() * 1000) % 10**6}"
    out = python(f"""
        import os
        from pathlib import Path
        from kanban.tools.procctl import become_subreaper, children
        from kanban.tools.runner import CommandSpec, PlainRunner
        assert become_subreaper()
        command = "setsid sleep {mark} >/dev/null 2>&1 & setsid -f sleep {mark}; echo ok"
        result = PlainRunner().run(CommandSpec.shell(
            command, cwd=Path({str(tmp_path)!r}), env=dict(os.environ), timeout_s=10,
            output_path=Path({str(tmp_path)!r}) / "out"))
        print(result.exit_code, len(children()))
    """)
    assert out.split() == ["0", "0"]
    alive = subprocess.run(["pgrep", "-f", f"sleep {mark}"], capture_output=True, text=True)
    assert alive.stdout == ""


def test_a_check_stops_a_running_command(tmp_path: Path) -> None:
    flag = tmp_path / "flag"
    spec = CommandSpec.shell("touch flag; sleep 30", cwd=tmp_path, env=dict(os.environ),
                             timeout_s=20, output_path=tmp_path / "out",
                             check=lambda: "flag seen" if flag.exists() else None)
    started = time.monotonic()
    result = PlainRunner().run(spec)
    assert result.stopped == "flag seen" and result.exit_code is None
    assert time.monotonic() - started < 10


def test_the_kernels_children_lists_name_what_a_scan_of_every_process_finds() -> None:
    """A subreaper's children (its own, a thread's, an adopted orphan, a zombie) read from
    /proc/PID/task/*/children, as a scan of every process's stat names them."""
    out = python("""
        import os, subprocess, threading, time
        from kanban.tools.procctl import (_children_files, _scanned_children,
                                          become_subreaper, children)
        become_subreaper()
        own = subprocess.Popen(["sleep", "30"])
        threaded = []
        t = threading.Thread(target=lambda: threaded.append(subprocess.Popen(["sleep", "30"])))
        t.start(); t.join()
        subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 &"])  # orphaned, adopted
        zombie = subprocess.Popen(["true"])
        deadline = time.monotonic() + 10
        while len(_scanned_children(os.getpid())) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # `true` has exited and is a zombie until waited for
        listed, scanned = children(), _scanned_children(os.getpid())
        print(_children_files(), len(listed), listed == scanned, zombie.pid in listed,
              own.pid in listed, threaded[0].pid in listed)
        for pid in listed:
            os.kill(pid, 9)
    """)
    assert out.split() == ["True", "4", "True", "True", "True", "True"], out
