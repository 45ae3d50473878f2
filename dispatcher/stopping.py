"""How a dispatcher stops: the first signal stops claiming and lets running workers finish
for --drain-timeout, a second (or the timeout) hands their cards back at once, with no
attempt spent.

Stopping never hangs on the database: from the first signal a watchdog thread allows the
drain, the workers' kill grace and `hand_back_budget()` for handing cards back; from a
second signal, SECOND_SIGNAL_S. Past that it stops the workers, names the cards it could
not hand back (their leases lapse, another dispatcher requeues them) and exits
EXIT_STRANDED, wherever the main thread waits (a statement to a server that went silent
never returns on its own).

A mixin of `Dispatcher` (dispatcher/loop.py), which owns the state named below.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import stat
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

from kanban.dispatcher import procs
from kanban.dispatcher.faults import OUTAGE_BACKOFF
from kanban.dispatcher.local import LocalWorkers
from kanban.dispatcher.logs import event
from kanban.dispatcher.options import DispatchOptions
from kanban.records import Claim
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.retry import retry_transient

SHUTDOWN_PATIENCE_S = 10.0  # how long a stopping dispatcher retries recording its stop
HAND_BACK_MIN_S = 5.0  # handing cards back gets max(--drain-timeout, this)
# After a second signal: what is not handed back by then stays out. At once to a person,
# yet room for a loaded host to kill a few workers and make their writes (0.5 s was not).
SECOND_SIGNAL_S = 3.0
EXIT_STRANDED = 75  # stopped with cards it could not hand back (EX_TEMPFAIL)


class Stopping:
    """The dispatcher's way of stopping (see the module's text)."""

    opts: DispatchOptions
    home: Path
    workers: LocalWorkers
    wake: threading.Event
    stop_requested: threading.Event
    hand_back: threading.Event
    stopped_by: int | None
    stranded: list[int]  # cards it could not hand back (set as it stops)
    _stop_calls: int
    _stop_deadline: float | None
    _stop_lock: threading.Lock
    exit_when_stuck: bool

    # the loop's own, used here
    def reap_exited(self) -> None:
        raise NotImplementedError

    def police_workers(self) -> None:
        raise NotImplementedError

    def _hand_back(self, claim: Claim, reason: str, delay_s: float = 0.0) -> None:
        raise NotImplementedError

    def init_stopping(self) -> None:
        self.stop_requested = threading.Event()
        self.hand_back = threading.Event()
        self._stop_calls = 0  # request_stop calls (signals): the second hands cards back
        self._stop_deadline = None  # exit by then, whatever hangs
        self._stop_lock = threading.Lock()
        self.stranded = []
        # Only a dispatcher that is its own process (`kanban dispatch`) may exit from the
        # watchdog; one embedded in another program (or a test) never is.
        self.exit_when_stuck = False

    def request_stop(self, signum: int | None = None) -> None:
        """First call: stop claiming, drain for --drain-timeout, hand the rest back. Second
        call: hand running cards back now."""
        if signum is not None:
            self.stopped_by = signum
        # Count the call before anything else: a second signal may run this handler again
        # in the middle of the first one's printing, and must count as the second.
        self._stop_calls += 1
        again = self._stop_calls > 1
        self.stop_requested.set()
        if self.exit_when_stuck:
            self._arm_stop_watch(SECOND_SIGNAL_S if again else self.opts.drain_timeout_s
                                 + self.opts.kill_grace_s + self.hand_back_budget())
        if again:
            self.hand_back.set()
            event(f"handing back {len(self.workers)} running card(s)", logging.WARNING,
                  kind="hand_back", running=len(self.workers))
        elif len(self.workers):
            event(f"stopping: {len(self.workers)} running card(s) may finish for "
                  f"{self.opts.drain_timeout_s:g}s, then go back to ready (signal again to "
                  "hand them back now)", kind="draining", running=len(self.workers))
        self.wake.set()

    def hand_back_budget(self) -> float:
        return max(self.opts.drain_timeout_s, HAND_BACK_MIN_S)

    def _arm_stop_watch(self, budget_s: float) -> None:
        """Exit by `budget_s` from now at the latest (an earlier deadline stands)."""
        with self._stop_lock:
            deadline = time.monotonic() + budget_s
            if self._stop_deadline is not None and self._stop_deadline <= deadline:
                return
            self._stop_deadline = deadline
        threading.Thread(target=self._watch_stop, args=(deadline,), name="stop-watch",
                         daemon=True).start()

    def _watch_stop(self, deadline: float) -> None:
        time.sleep(max(0.0, deadline - time.monotonic()))
        with self._stop_lock:
            if self._stop_deadline != deadline:
                return  # a nearer deadline's thread acts, or the stop is over
        stacks = self._record_stacks()
        running = list(self.workers)
        for worker in running:  # their cards stay claimed until the leases lapse
            procs.signal_group(worker.pid, signal.SIGKILL)
        if running:
            self._strand(sorted(w.card_id for w in running), "the database did not answer "
                         "in time")
        else:  # every card went back; recording the stop itself hung
            event("stopping took longer than allowed (the database did not answer); "
                  "exiting", logging.ERROR, kind="stop_overdue")
        if stacks is not None:
            event(f"where each thread of the dispatcher waited when its stop ran out of "
                  f"time: {stacks}", logging.ERROR, kind="stop_stacks", path=str(stacks))
        with suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(EXIT_STRANDED)

    def _record_stacks(self) -> Path | None:
        """Every thread's stack, into a file beside the workers' logs: "the database did
        not answer" is the likely reason a stop runs out of time, not the only one (a
        worker that would not die, a lock of this process), and the stacks tell which.
        Function names and lines only: no values, so no secret.

        The name is predictable, so whatever sits there is distrusted: a symbolic link is
        not followed, a FIFO would block the watchdog (opened non-blocking, it refuses),
        and a file with a second hard link, or not this user's, is left as it is: it may be
        another file of the user's under a second name."""
        path = self.home / "logs" / f"stop-overdue-{os.getpid()}.txt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                         0o600)
        except OSError:
            return None
        try:
            found = os.fstat(fd)
            if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1 or \
                    found.st_uid != os.geteuid():
                return None
            os.fchmod(fd, 0o600)  # a file left by an earlier process of this pid
            os.ftruncate(fd, 0)
            faulthandler.dump_traceback(fd, all_threads=True)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        return path

    def stop_done(self) -> None:
        """Shutdown finished: the watchdog stands down."""
        with self._stop_lock:
            self._stop_deadline = -1.0

    def _strand(self, cards: list[int], why: str) -> None:
        self.stranded = cards
        named = ", ".join(f"#{c}" for c in cards) or "no card"
        event(f"could not hand back {named} ({why}); their leases will lapse and another "
              "dispatcher requeues them", logging.ERROR, kind="stranded", cards=cards)

    def _drain(self, timeout_s: float | None) -> None:
        """Let running workers finish for up to timeout_s (None: as long as they take; a
        signal ends that early), then stop the rest and hand their cards back: no attempt
        spent."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(self.workers) and not self.hand_back.is_set() and (
                deadline is None or time.monotonic() < deadline):
            if deadline is None and self.stop_requested.is_set():
                deadline = time.monotonic() + self.opts.drain_timeout_s
            with suppress(TransientDatabaseError):
                self.reap_exited()
                self.police_workers()
            self.wake.wait(0.05)
            self.wake.clear()
        for worker in self.workers:  # all at once: the kernel tears them down together
            procs.signal_group(worker.pid, signal.SIGKILL)
        for worker in self.workers:
            procs.kill_and_confirm(worker.pid, timeout=self.opts.kill_grace_s)
        try:
            retry_transient(self._hand_back_all, patience_s=self.hand_back_budget(),
                            backoff=OUTAGE_BACKOFF)
        except DatabaseError as exc:
            self._strand(sorted(w.card_id for w in self.workers), exc.message)

    def _hand_back_all(self) -> None:
        for worker in self.workers:
            self._hand_back(worker.claim, "the dispatcher stopped before the card finished")
            self.workers.pop(worker.pid)
            event(f"#{worker.card_id} handed back to ready (no attempt spent)",
                  logging.WARNING, kind="handed_back", card=worker.card_id, pid=worker.pid)
        self.reap_exited()
