"""The runner of sandboxed commands: `BwrapRunner` runs each command of a card in the
card's sandbox (one bwrap kept for all of them, `SandboxSession`), or in a bwrap of its own
where that sandbox cannot start or has died. The sandbox itself is `SandboxPolicy`'s.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from kanban.tools.hostview import SystemView, own_interpreter
from kanban.tools.runner import CommandResult, CommandSpec, PlainRunner
from kanban.tools.sandbox import SandboxPolicy
from kanban.tools.sandbox_session import SandboxSession
from kanban.tools.sandbox_watch import watched


class BwrapRunner:
    """A `PlainRunner` (process group, rlimits, timeout) whose commands run in a sandbox:
    one sandbox kept alive for all of them (`SandboxSession`), or where it cannot start or
    has died, a fresh one per command. `wrap` (long-lived servers) always makes a fresh one."""

    name = "bwrap"
    own_pids = True  # bwrap --unshare-pid: a pid names one of the sandbox's own processes

    def __init__(self, policy: SandboxPolicy, inner: PlainRunner | None = None,
                 bwrap: str = "bwrap", *, session: bool = True) -> None:
        self.policy = policy
        self.inner = inner or PlainRunner()
        self.bwrap = bwrap
        self._lock = threading.Lock()
        self._session: SandboxSession | None = None
        self._session_view: SystemView | None = None  # what the session was started with
        # The session's server is this Python: only where the policy shows it.
        self._use_session = session and interpreter_visible(policy)
        self._said = False
        self.inner.on_cancel(self._cancel_session)

    def wrap(self, argv: Sequence[str], cwd: Path, view: SystemView | None = None) -> list[str]:
        return self.policy.wrap(argv, cwd, self.bwrap, view)

    def run(self, spec: CommandSpec) -> CommandResult:
        try:
            return self._run(spec)
        finally:
            self._after()

    def _after(self) -> None:
        if self.policy.after is not None:
            self.policy.after()

    def _run(self, spec: CommandSpec) -> CommandResult:
        session = self._live_session()
        if session is not None:
            env = dict(spec.env)
            if self.policy.home is not None:  # as bwrap's --setenv does per command
                env["HOME"] = str(self.policy.home)
            result = session.run(watched(spec, self.policy.tmp_files, session.bwrap_pid,
                                         most_processes=self.policy.most_processes,
                                         most_memory=self.policy.most_memory),
                                 self.inner.argv(spec), env, lambda: self.inner.cancelled)
            if session.dead:
                self._fall_back("the card's sandbox ended")
            if result is not None:
                return result
        view = self.policy.view()
        result = self._run_once(spec, view)
        if _mount_point_gone(result, view):  # /etc changed under it: again, as it is now
            result = self._run_once(spec, self.policy.view())
        return result

    def _run_once(self, spec: CommandSpec, view: SystemView) -> CommandResult:
        own = replace(spec, argv=tuple(self.wrap(spec.argv, spec.cwd, view)))
        return self.inner.run(watched(own, self.policy.tmp_files, self.inner.running,
                                      most_processes=self.policy.most_processes,
                                      most_memory=self.policy.most_memory))

    def _live_session(self) -> SandboxSession | None:
        with self._lock:
            if not self._use_session:
                return None
            if self._session is not None and self._session_view != self.policy.view():
                # /etc's secrets changed: a file to hide binds over nothing in the running
                # sandbox (a key written since shows there), so it ends, with what it runs
                old, self._session = self._session, None
                old.close()
                print("kanban: the host's /etc changed; the card's sandbox starts again",
                      file=sys.stderr, flush=True)
            if self._session is None:
                self._session, self._session_view = self._start_session()
                if self._session.dead:
                    self._use_session = False
                    self._say(f"the card's sandbox did not start ({self._session.why})")
                    return None
            return self._session

    def _start_session(self) -> tuple[SandboxSession, SystemView]:
        """The card's sandbox and the view it has; started again once where /etc changed
        while it started (a file to hide, gone before bwrap bound over it, fails it)."""
        for _ in range(2):
            view = self.policy.view()
            session = SandboxSession(functools.partial(self.wrap, cwd=Path("/"), view=view))
            if session.start() or self.policy.view() == view:
                break
        return session, view

    def _fall_back(self, why: str) -> None:
        with self._lock:
            self._use_session = False
        self._say(why)

    def _say(self, why: str) -> None:
        """Once, in the worker's log: commands go on sandboxed, each in its own bwrap."""
        if not self._said:
            self._said = True
            print(f"kanban: {why}; each command now starts its own bwrap (slower, as "
                  "sandboxed)", file=sys.stderr, flush=True)

    def _cancel_session(self) -> None:
        session = self._session
        if session is not None:
            session.cancel()

    def cancel_all(self) -> None:
        self.inner.cancel_all()

    def close(self) -> None:
        """End the card's sandbox (the run is over); later commands get a bwrap each."""
        with self._lock:
            session, self._session = self._session, None
            self._use_session = False
        if session is not None:
            session.close()
        self._after()


_NO_MOUNT_POINT = re.compile(rb"bwrap: Can't (?:create file at|mkdir) (/[^\n]*?): ")


def _mount_point_gone(result: CommandResult, view: SystemView) -> bool:
    """Whether bwrap stopped before the command because a file or folder it was to hide is
    no longer there (removed after the view was read)."""
    if result.exit_code != 1 or result.output_bytes > 4096:
        return False
    try:
        head = result.output_path.read_bytes()[:4096]
    except OSError:
        return False
    found = _NO_MOUNT_POINT.match(head)
    if found is None:
        return False
    path = Path(os.fsdecode(found.group(1)))
    return path in (*view.hidden_files, *view.hidden_dirs) and not os.path.lexists(path)


def bwrap_runner(runner: object) -> BwrapRunner | None:
    """The BwrapRunner inside `runner` (a ProxiedRunner or CountedRunner around one)."""
    inner = runner
    for _ in range(4):
        if isinstance(inner, BwrapRunner):
            return inner
        inner = getattr(inner, "inner", None)
    return None


def offline(runner: object) -> Callable[[Sequence[str], Path], list[str]]:
    """How `runner` starts a command of kanban's own that needs no network (git on a
    card's worktree): in the card's sandbox without one, where it has a sandbox (a network
    proxy's bridge or a network namespace of the card's own would only cost time)."""
    inner = bwrap_runner(runner)
    if inner is not None:
        bwrap, policy = inner.bwrap, replace(inner.policy, network=False, proxy_socket=None)
        return lambda argv, cwd: policy.wrap(argv, cwd, bwrap)
    return runner.wrap  # type: ignore[attr-defined]


def interpreter_visible(policy: SandboxPolicy) -> bool:
    """Whether this Python (what the session's server runs on) is readable in the sandbox."""
    view = policy.view()
    shown = (*view.binds, *policy.readable, *policy.writable)
    hidden = (*view.hidden_dirs, *policy.hidden)
    return all(any(place.is_relative_to(p) for p in shown)
               and not any(place.is_relative_to(h) for h in hidden)
               for place in own_interpreter())
