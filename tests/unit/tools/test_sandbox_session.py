"""One sandbox per card: commands share it, but nothing a command starts outlives it, and
every bound (timeout, cancel, budget) holds as with a bwrap per command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kanban.tools.hostview import own_interpreter
from kanban.tools.runner import CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy
from kanban.tools.sandbox_runner import BwrapRunner
from tests.support.procs import wait_until
from tests.support.sandbox import card_runner, run_in, sandbox_workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return sandbox_workspace(tmp_path)


def sandbox_pid(box: BwrapRunner) -> int:
    """The pid (outside) of the card's live sandbox."""
    session = box._session
    assert session is not None and session._proc is not None and not session.dead
    return session._proc.pid


def test_two_commands_share_one_sandbox_but_not_a_daemon(workspace: Path) -> None:
    box = card_runner(workspace)
    try:
        first, text = run_in(box, workspace, "setsid sleep 300 & nohup sleep 301 >/dev/null & "
                          "echo started; ls -d /proc/[0-9]* | wc -l")
        assert first.exit_code == 0 and "started" in text
        pid = sandbox_pid(box)
        second, text = run_in(box, workspace, "ps -eo args | grep -c '[s]leep 30'; "
                           "ls /proc | grep -c '^[0-9]'")
        assert sandbox_pid(box) == pid  # the same sandbox
        daemons, processes = text.split()
        assert second.exit_code == 0 and daemons == "0"
        # bwrap's init, the server, timeout, bash and ls: nothing left from before
        assert int(processes) <= 6, text
    finally:
        box.close()


def test_a_command_sees_the_sandbox_not_the_host(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    box = card_runner(workspace)
    try:
        result, text = run_in(box, workspace, f"cat {secret}; echo $$; pwd; touch made")
        assert result.exit_code == 0 and "host secret" not in text
        assert (workspace / "made").exists()
        assert str(workspace) in text
        assert box._session is not None  # it ran in the session
    finally:
        box.close()


def test_a_timeout_kills_the_command_and_the_next_one_runs(workspace: Path) -> None:
    box = card_runner(workspace)
    try:
        run_in(box, workspace, "true")
        result, _ = run_in(box, workspace, "trap '' TERM; sleep 60", timeout_s=1.0)
        assert result.timed_out and result.exit_code is None
        assert result.duration_s < 10
        after, text = run_in(box, workspace, "ps -eo args | grep -c '[s]leep 60'")
        assert text.strip() == "0" and after.exit_code == 1
        assert not box._session.dead  # type: ignore[union-attr]
    finally:
        box.close()


def test_cancel_all_kills_the_running_command(workspace: Path) -> None:
    inner = PlainRunner()
    box = card_runner(workspace, inner)
    try:
        run_in(box, workspace, "true")
        threading.Timer(0.5, inner.cancel_all).start()  # the worker's SIGTERM handler's call
        result, _ = run_in(box, workspace, "sleep 60")
        assert result.cancelled and result.exit_code is None
        assert result.duration_s < 10
        later, _ = run_in(box, workspace, "echo never")
        assert later.cancelled and later.exit_code is None
    finally:
        box.close()


def test_a_budget_check_stops_the_command(workspace: Path) -> None:
    box = card_runner(workspace)
    calls: list[int] = []

    def check() -> str | None:
        calls.append(1)
        return "over budget" if len(calls) >= 2 else None

    try:
        run_in(box, workspace, "true")
        result, _ = run_in(box, workspace, "sleep 60", check=check)
        assert result.stopped == "over budget" and result.exit_code is None
        assert result.duration_s < 10
    finally:
        box.close()


def test_a_dead_session_falls_back_and_still_sandboxes(workspace: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    box = card_runner(workspace)
    try:
        run_in(box, workspace, "true")
        os.kill(sandbox_pid(box), signal.SIGKILL)
        wait_until(lambda: box._session is not None and box._session.dead, timeout=10,
                   what="the session noticed")
        result, text = run_in(box, workspace, f"cat {secret}; echo $$")
        assert "host secret" not in text
        assert text.split()[-1] in ("1", "2")  # a PID namespace of its own: bwrap's
        assert result.exit_code == 0
        assert "each command now starts its own bwrap" in capsys.readouterr().err
        again, text = run_in(box, workspace, "echo again")
        assert again.exit_code == 0 and text == "again\n"
    finally:
        box.close()


def test_a_sandbox_that_does_not_start_says_why_and_commands_still_run(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its launcher's last line (here a fake bwrap's, with a terminal escape in it) is in
    the worker's log, escaped; commands go on, each in a bwrap of its own."""
    box = card_runner(workspace)
    box.wrap = lambda argv, cwd, view=None: (  # type: ignore[method-assign]
        ["sh", "-c", "echo 'bwrap: warming up' >&2; "
         "printf 'bwrap: No space left on device \\033[2J\\n' >&2; exit 1"]
        if "-S" in argv else box.policy.wrap(argv, cwd, box.bwrap, view))
    try:
        result, text = run_in(box, workspace, "echo $$")
        assert result.exit_code == 0 and text.strip() in ("1", "2")  # sandboxed anyway
        err = capsys.readouterr().err
        assert ("the card's sandbox did not start (bwrap: No space left on device \\x1b[2J)"
                in err), err
        assert "\x1b" not in err and "warming up" not in err
    finally:
        box.close()


def test_a_sandbox_whose_server_ends_at_once_says_so(workspace: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    box = card_runner(workspace)
    box.wrap = lambda argv, cwd, view=None: (  # type: ignore[method-assign]
        ["true"] if "-S" in argv else box.policy.wrap(argv, cwd, box.bwrap, view))
    try:
        result, _ = run_in(box, workspace, "true")
        assert result.exit_code == 0
        assert ("the card's sandbox did not start (its server ended before it answered)"
                in capsys.readouterr().err)
    finally:
        box.close()


def test_a_sandbox_whose_command_cannot_be_made_says_so_instead_of_waiting(
        workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever making the sandbox's command raises (not only an OSError from starting it),
    the worker is told and goes on: it used to wait for the server forever."""
    box = card_runner(workspace)

    def wrap(argv: list[str], cwd: Path, view: object = None) -> list[str]:
        if "-S" in argv:
            raise ValueError("no view of the host")
        return box.policy.wrap(argv, cwd, box.bwrap)

    box.wrap = wrap  # type: ignore[method-assign]
    try:
        result, text = run_in(box, workspace, "echo $$")
        assert result.exit_code == 0 and text.strip() in ("1", "2"), text
        assert ("the card's sandbox did not start (bwrap cannot start (no view of the host))"
                in capsys.readouterr().err)
    finally:
        box.close()


def test_killed_mid_command_the_sandbox_says_so_then_falls_back(workspace: Path) -> None:
    box = card_runner(workspace)
    try:
        run_in(box, workspace, "true")
        pid = sandbox_pid(box)
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        result, _ = run_in(box, workspace, "sleep 60")
        assert result.exit_code is None and result.error is not None
        assert result.duration_s < 10
        after, text = run_in(box, workspace, "echo fine")
        assert after.exit_code == 0 and text == "fine\n"
    finally:
        box.close()


def test_output_larger_than_a_pipe_arrives_whole(workspace: Path) -> None:
    box = card_runner(workspace)
    try:
        result, text = run_in(box, workspace, "head -c 3000000 /dev/zero | tr '\\0' x; echo end")
        assert result.exit_code == 0 and result.output_bytes == 3_000_004
        assert text.endswith("xxxend\n") and text.count("x") == 3_000_000
    finally:
        box.close()


def test_stdin_exit_codes_and_a_missing_program(workspace: Path) -> None:
    box = card_runner(workspace)
    try:
        out = workspace.parent / "out" / "o.txt"
        env = {"PATH": os.environ["PATH"], "MARK": "given"}
        result = box.run(CommandSpec(argv=("cat",), cwd=workspace, env=env, timeout_s=10,
                                     output_path=out, stdin=b"piped in"))
        assert result.exit_code == 0 and out.read_text() == "piped in"
        result, text = run_in(box, workspace, "echo $MARK; exit 7")
        assert result.exit_code == 7
        result = box.run(CommandSpec(argv=("sh", "-c", "echo $MARK"), cwd=workspace,
                                     env=env, timeout_s=10, output_path=out))
        assert out.read_text() == "given\n"
        result, text = run_in(box, workspace, "no-such-program-here")
        assert result.exit_code == 127
    finally:
        box.close()


def test_close_ends_the_sandbox_and_wrap_is_a_fresh_bwrap(workspace: Path) -> None:
    box = card_runner(workspace)
    run_in(box, workspace, "true")
    pid = sandbox_pid(box)
    argv = box.wrap(["true"], workspace)
    # servers get their own sandbox
    assert any(a.rsplit("/", 1)[-1] == "bwrap" for a in argv) and argv[-1] == "true"
    box.close()
    wait_until(lambda: _ended(pid), timeout=10, what="the sandbox ended")
    result, text = run_in(box, workspace, "echo after")
    assert result.exit_code == 0 and text == "after\n"


def test_a_timeout_while_a_budget_is_polled_is_a_timeout(workspace: Path) -> None:
    box = card_runner(workspace)  # the terminal tool's way: a check polled up to the deadline
    try:
        result, _ = run_in(box, workspace, "sleep 60", timeout_s=1.0, check=lambda: None)
        assert result.timed_out and result.exit_code is None and result.error is None
        assert not box._session.dead  # type: ignore[union-attr]
    finally:
        box.close()


def test_each_command_finds_tmp_and_ipc_as_fresh_but_the_workspace_kept(
        workspace: Path) -> None:
    box = card_runner(workspace)  # the workspace itself lies under /tmp (pytest's tmp_path)
    try:
        made, _ = run_in(box, workspace, "echo kept > kept.txt; mkdir -p /tmp/d/e; "
                      "echo left > /tmp/d/e/f; echo left > /tmp/g; ln -s / /tmp/root; "
                      "echo shm > /dev/shm/s; ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null")
        assert made.exit_code == 0
        result, text = run_in(box, workspace, "ls -A /tmp /dev/shm; ipcs -m -q | grep -c '^0x'; "
                           "cat kept.txt")
        shm, tmp = text.split("/tmp:\n")
        assert shm.split() == ["/dev/shm:"], text
        # /tmp keeps the mount points of what is bound under it: the workspace, and this
        # Python when the checkout lies under /tmp
        bound = [workspace, *own_interpreter()]
        tops = sorted({p.parts[2] for p in bound if p.parts[1:2] == ("tmp",) and len(p.parts) > 2})
        assert tmp.split() == [*tops, "0", "kept"], text
        assert (workspace / "kept.txt").read_text() == "kept\n"
    finally:
        box.close()


@pytest.mark.parametrize("session", [True, False], ids=["session", "bwrap per command"])
def test_files_in_the_sandboxs_memory_are_counted_while_a_command_runs(
        workspace: Path, session: bool) -> None:
    """Empty files in /tmp and /dev/shm take kernel memory, not the tmpfs's --size: past
    tmp_files the watched command is stopped, in a card's sandbox or a bwrap of its own."""
    policy = SandboxPolicy(writable=(workspace,), network=False, readable=own_interpreter(),
                           tmp_files=500)
    box = BwrapRunner(policy, session=session)
    try:
        flood = "cd /dev/shm && touch a b; cd /tmp && for i in $(seq 1 100); do " \
                "touch $(seq -f \"$i-%g\" 1 1000); sleep 0.05; done"
        stopped, _ = run_in(box, workspace, flood, check=lambda: None)
        assert stopped.stopped is not None and "more than 500" in stopped.stopped
        calm, text = run_in(box, workspace, "touch /tmp/one /dev/shm/two && echo made",
                         check=lambda: None)
        assert calm.stopped is None and calm.exit_code == 0 and "made" in text
        unwatched, _ = run_in(box, workspace, "cd /tmp && touch $(seq 1 2000)")  # no check
        assert unwatched.stopped is None and unwatched.exit_code == 0
    finally:
        box.close()


def _ended(pid: int) -> bool:
    """Dead: a zombie, or reaped (its /proc entry may go between two reads of it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except OSError:
        return True


# A fresh Python whose lowest free descriptors are 8 and 9 when the session makes its
# socket pair: the server's end sat on 9, where the sandbox's launcher opens the seccomp
# filter, and the shared sandbox never started (a worker with few files open).
LOW_FDS = r"""
import os, sys
from pathlib import Path
while os.open("/dev/null", os.O_RDONLY) < 7:
    pass
from kanban.tools.hostview import own_interpreter
from kanban.tools.runner import CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy
from kanban.tools.sandbox_runner import BwrapRunner
ws = Path(sys.argv[1])
box = BwrapRunner(SandboxPolicy(writable=(ws,), readable=own_interpreter(), network=False),
                  PlainRunner())
result = box.run(CommandSpec.shell("echo ran", cwd=ws, env={"PATH": os.environ["PATH"]},
                                   output_path=ws.parent / "low.out", timeout_s=20))
session = box._session
print(result.exit_code, session is not None and not session.dead)
box.close()
"""


def test_the_shared_sandbox_starts_whatever_descriptor_its_socket_gets(
        workspace: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", LOW_FDS, str(workspace)], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout.split() == ["0", "True"], proc.stderr
