"""A warm parent that forks workers with everything already imported.

Started by the dispatcher with a scrubbed environment (no credentials), it reads
one JSON spawn request per line on stdin and answers `{"id", "pid"}` on stdout;
when a worker exits it reports `{"exit": pid, "code": n}`. Each worker is a
full process: its own session and process group, its own cwd, log and
environment. EOF on stdin shuts the server down (workers keep running).

The server is non-dumpable and a child subreaper: what a dead worker leaves behind (the
commands it ran, their daemons) is re-parented here and killed at once. Its first child is
the model gateway (`kanban.agent.gateway`), which makes its workers' model calls; forked
again if it ends.
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from kanban.agent import gateway
from kanban.tools.hostview import system_view
from kanban.tools.procctl import become_subreaper, kill_adopted, undumpable
from kanban.worker import handoff, holes
from kanban.worker.forked import run_child, run_spare

if TYPE_CHECKING:
    from kanban.state.store import Database

# After a spawn, the next spare is forked once the requests already sent are served. A wait
# here (there was one of 50 ms, to leave the new worker the CPU) made the next card after a
# quick one meet a spare still getting ready: 10 ms created → first model call, not 7.5
# (bench row 2.1), at the same end-to-end throughput (row 3.1).
SPARE_DELAY_S = 0.0


def preload(db_target: str | None, providers: list[str]) -> Database | None:
    """Import what a worker needs and check its database, so a fork starts fast.

    Only the SDKs of `providers` are imported; a worker needing another imports it itself.
    No connection stays open: none may cross a fork.
    """
    import tomllib  # noqa: F401  (every worker reads its config: the last import after a fork)

    import kanban.agent.scripts  # noqa: F401
    import kanban.tools.catalog  # noqa: F401
    import kanban.worker.main  # noqa: F401
    from kanban import agent, toolsets
    from kanban.agent.user_hooks import hook_points
    from kanban.state import open_database
    from kanban.state.paths import DbLocation
    from kanban.tools.shellparse import bashlex
    from kanban.worker.sandboxing import probe_host

    agent.preload(providers)
    probe_host()
    bashlex()  # the command gate's parser: half a second of grammar tables, once
    # The installed plug-ins, scanned once here rather than in every worker (~30 ms each).
    hook_points()
    toolsets.plugins()
    if db_target is None:
        return None
    db = open_database(DbLocation(db_target, "env"))
    db.dispose()
    return db


ADAPTERS = ("openai", "openai-responses", "anthropic")  # the model SDKs worth preloading
GATEWAY_QUICK_S = 5.0  # a gateway that ends this soon after its start ended "quickly"
GATEWAY_QUICK_ENDS = 3  # ... and after this many such ends in a row, none is forked


class DispatcherGone(Exception):
    """Nobody reads our reports any more: the dispatcher died. Its workers run on (a new
    dispatcher requeues their cards); this server leaves without a word."""


class ForkServer:
    def __init__(self, stdin_fd: int, out_fd: int, db: Database | None, *,
                 spares: bool = True, handoffs: socket.socket | None = None,
                 warmed: Iterable[str] = ()) -> None:
        self.db = db
        self.warmed = set(warmed)  # the model SDKs imported here (`_warm_for`)
        self.stdin_fd = stdin_fd
        self.out_fd = out_fd
        self.handoffs = handoffs  # the dispatcher passes each worker's credential pipe here
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.buffer = b""
        self.spares = spares
        self.spare: tuple[int, socket.socket] | None = None  # (pid, its request socket)
        self.spare_pids: set[int] = set()  # spares not handed a request (yet)
        self.spare_due: float | None = None  # when to fork the next spare
        self.workers: set[int] = set()  # every child we forked and have not reaped
        self.gateway: int | None = None  # the model gateway's pid
        self.gateway_since = 0.0  # when it was last forked (monotonic)
        self.gateway_quick_ends = 0  # gateways in a row that ended soon after their start

    def send(self, message: dict[str, Any]) -> None:
        try:
            os.write(self.out_fd, (json.dumps(message) + "\n").encode())
        except (BrokenPipeError, ConnectionResetError):
            raise DispatcherGone from None

    def serve(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        selector = selectors.DefaultSelector()
        selector.register(self.stdin_fd, selectors.EVENT_READ)
        selector.register(self.wake_r, selectors.EVENT_READ)
        self.send({"ready": True, "pid": os.getpid()})
        # Processes the preload started and left (the bwrap probe's), adopted by us as a
        # subreaper before SIGCHLD was ours to hear: collected now, not at the first exit.
        self._sweep()
        self._reap()
        self._open_gateway()
        self._new_spare()
        try:
            while True:
                events = selector.select(self._until_spare())
                for key, _ in events:
                    if key.fd == self.wake_r:
                        self._drain_wakeups()
                        self._sweep()  # a child exited: a dead worker's orphans are ours
                    elif not self._read_requests():
                        return
                if self._reap() or not events:
                    self._new_spare()  # a worker left or we were idle: the CPU is free
        finally:
            self.close_spare()

    def _open_gateway(self) -> None:
        """Fork the model gateway: the workers forked from now on send it their calls."""
        self.gateway_since = time.monotonic()

        def fork(child: Callable[[], None]) -> int:
            held = self._held()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in held:  # the dispatcher's pipes: it must see EOF when we go
                    with suppress(OSError):
                        os.close(fd)
                child()  # never returns
            return pid

        self.gateway = gateway.open_gateway(fork)

    def _until_spare(self) -> float | None:
        """How long select() may wait before a spare is due (None: no spare to make)."""
        if self.spare is not None or self.spare_due is None:
            return None
        return max(0.0, self.spare_due - time.monotonic())

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _read_requests(self) -> bool:
        data = os.read(self.stdin_fd, 65536)
        if not data:
            return False
        self.buffer += data
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            if line.strip():
                self._spawn(line)
        return True

    def _spawn(self, line: bytes) -> None:
        request = json.loads(line)
        credentials = self._credentials(request)
        try:
            pid = self._hand_to_spare(line, credentials)  # the spare parses it itself
            if pid is None:
                if credentials is not None:
                    request["env"][handoff.HANDOFF_FD] = str(credentials)
                pid = self._fork(lambda: run_child(request, self._held(), self.db))
        finally:
            if credentials is not None:
                os.close(credentials)  # the worker has its own copy
        self.send({"id": request["id"], "pid": pid})
        # Off the dispatch path now: what the next worker would do itself after its fork.
        from kanban.worker.warm import remember_config

        remember_config(request["env"].get("KANBAN_CONFIG", ""))
        self._warm_for(request["env"].get("KANBAN_MODEL", ""))
        # The next spare once the requests already sent are served (SPARE_DELAY_S).
        self.spare_due = time.monotonic() + SPARE_DELAY_S

    def _warm_for(self, model: str) -> None:
        """A worker's model whose SDK was not preloaded (no profile names it: a card's own
        model): loaded now, after that worker started cold, so the next one starts warm."""
        provider = model.split(":", 1)[0]
        if provider not in ADAPTERS or provider in self.warmed:
            return
        self.warmed.add(provider)
        from kanban import agent

        # Seconds of CPU (more on a loaded host) in which requests wait: the dispatcher
        # is told, so it waits for its next pid beyond its usual patience.
        self.send({"warming": provider})
        try:
            agent.preload([provider])
        except Exception:  # noqa: BLE001 - a cold SDK is slower, never broken
            pass
        else:
            gc.collect()
            holes.fill()
            gc.freeze()  # the spare (just handed this request) is forked again after this
        finally:
            self.send({"warming": None})

    def _credentials(self, request: dict[str, Any]) -> int | None:
        """The credential pipe the dispatcher passed ahead of this request, never read here."""
        if not request.get("handoff") or self.handoffs is None:
            return None
        return handoff.take(self.handoffs)

    def _held(self) -> list[int]:
        """Descriptors of ours that no child may keep."""
        fds = [self.stdin_fd, self.out_fd, self.wake_r, self.wake_w]
        if self.handoffs is not None:
            fds.append(self.handoffs.fileno())
        return fds if self.spare is None else [*fds, self.spare[1].fileno()]

    def _fork(self, child: Callable[[], None]) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child()  # never returns
        self.workers.add(pid)
        return pid

    def _hand_to_spare(self, line: bytes, credentials: int | None) -> int | None:
        """The spare's pid once it has the request line (and the credential pipe); None
        without a (living) spare."""
        if self.spare is None:
            return None
        pid, channel = self.spare
        self.spare = None
        try:
            data = line + b"\n"
            if credentials is not None:
                handoff.pass_on(channel, credentials, data)
            else:
                channel.sendall(data)  # a full buffer blocks only until the spare reads it
        except OSError:  # it died waiting (killed by hand, the OOM killer): fork anew
            return None
        finally:
            channel.close()
        self.spare_pids.discard(pid)
        return pid

    def _gateway_ended(self) -> None:
        """Killed by hand or by the OOM killer: forked again, unless gateways keep ending
        soon after they start (GATEWAY_QUICK_ENDS in a row); then workers make their own
        calls rather than this server forking gateways in a loop."""
        self.gateway = None
        quick = time.monotonic() - self.gateway_since < GATEWAY_QUICK_S
        self.gateway_quick_ends = self.gateway_quick_ends + 1 if quick else 0
        if self.gateway_quick_ends < GATEWAY_QUICK_ENDS:
            self._open_gateway()
            return
        gateway.forget()
        print(f"kanban: the model gateway ended {GATEWAY_QUICK_ENDS} times within "
              f"{GATEWAY_QUICK_S:.0f} s of its start; workers make their own model calls",
              file=sys.stderr, flush=True)

    def _new_spare(self) -> None:
        if self.spare is not None or not self.spares:
            return
        self.spare_due = None
        system_view()  # /etc looked at now, off the dispatch path: the spare inherits it
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        held = self._held()
        pid = self._fork(lambda: run_spare(theirs.fileno(), [*held, mine.fileno()], self.db))
        theirs.close()
        self.spare = (pid, mine)
        self.spare_pids.add(pid)

    def _reap(self) -> bool:
        """Report exited workers; True if any."""
        reported = False
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return reported
            if pid == 0:
                return reported
            if pid == self.gateway:
                self._gateway_ended()
                continue
            if pid not in self.workers:  # adopted from a dead worker, killed by _sweep
                continue
            self.workers.discard(pid)
            if pid in self.spare_pids:  # a spare that never ran a card: nobody knows it
                self.spare_pids.discard(pid)
                if self.spare is not None and self.spare[0] == pid:
                    self.spare[1].close()
                    self.spare = None
                continue
            self.send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
            reported = True

    def _sweep(self) -> None:
        """Kill the processes a dead worker left to us (they are not workers of ours). Never
        blocks: `_reap` collects them, and their own children, adopted as they die, wake us
        for the next sweep."""
        kill_adopted(lambda pid, start: pid in self.workers or pid == self.gateway,
                     reap=False)

    def close_spare(self) -> None:
        """At shutdown: the spare reads EOF and leaves."""
        if self.spare is not None:
            self.spare[1].close()
            self.spare = None


def first_line(fd: int) -> dict[str, Any]:
    """The dispatcher's first line on `fd` (the board's address, kept off the command line),
    read a byte at a time so nothing after it is taken from the requests that follow."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise SystemExit(0)  # the dispatcher went away before it said where the board is
        line += byte
    return dict(json.loads(line))


def main() -> None:
    # The protocol owns the original stdout; stray prints go to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    undumpable()
    become_subreaper()
    args = sys.argv[1:]
    providers = args[0].split(",") if args and args[0] else []
    handoffs = socket.socket(fileno=int(args[1])) if len(args) > 1 and args[1] else None
    db = preload(first_line(0).get("db") or None, providers)
    gc.collect()
    holes.fill()  # what a worker allocates goes to pages of its own (worker.holes)
    gc.freeze()  # keep forked workers from copying pages the collector would touch
    with suppress(DispatcherGone):
        ForkServer(0, out_fd, db, handoffs=handoffs, warmed=providers).serve()


if __name__ == "__main__":
    main()
