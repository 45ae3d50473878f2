"""Group commit: one writer thread per process gathers the fenced writes that arrive
together (those queued while the previous commit was in flight, and those that follow the
first within `linger_s`) and commits them in one transaction (kanban.batch_writes).

Each caller is answered only after the commit that holds its write returned, so an
acknowledged completion is never lost; a write refused by its own claim token gets its
own LeaseLost while its batch-mates commit.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime

from kanban import batch_writes
from kanban.batch_writes import Outcome, Write
from kanban.state.store import Database

LINGER_S = 0.0003  # how long the first write of a batch waits for company
MAX_BATCH = 64


class GroupCommitter:
    """`submit` a write, get a Future that resolves once the write is committed (or raises
    what refused or failed it); `write` waits for that answer."""

    def __init__(self, db: Database, clock: Callable[[], datetime], *,
                 linger_s: float = LINGER_S, max_batch: int = MAX_BATCH) -> None:
        self.db = db
        self.clock = clock
        self.linger_s = linger_s
        self.max_batch = max_batch
        self.batches = 0  # commits made (each holding one or more writes)
        self._pending: queue.SimpleQueue[tuple[Write, Future[Outcome]] | None] = \
            queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        ref = weakref.ref(self)

        def forget_in_child() -> None:  # a forked child has no writer thread: start afresh
            committer = ref()
            if committer is not None:
                committer._forget()

        os.register_at_fork(after_in_child=forget_in_child)

    def submit(self, write: Write) -> Future[Outcome]:
        future: Future[Outcome] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the group committer is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="group-commit",
                                                daemon=True)
                self._thread.start()
            self._pending.put((write, future))
        return future

    def write(self, write: Write, timeout: float | None = None) -> Outcome:
        """Submit and wait: the outcome once committed; a refusal or failure is raised."""
        return self.submit(write).result(timeout)

    def close(self) -> None:
        """Commit what is queued, then end the writer thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
            if thread is not None:
                self._pending.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _forget(self) -> None:
        self._pending = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread = None

    def _run(self) -> None:
        while True:
            batch, last = self._gather()
            if batch:
                self._commit(batch)
            if last:
                return

    def _gather(self) -> tuple[list[tuple[Write, Future[Outcome]]], bool]:
        """The next batch: everything queued, plus what arrives within linger_s of the
        first; True as well when close() was called."""
        first = self._pending.get()
        if first is None:
            return [], True
        batch = [first]
        until = time.monotonic() + self.linger_s
        while len(batch) < self.max_batch:
            try:
                item = self._pending.get(timeout=max(0.0, until - time.monotonic())) \
                    if time.monotonic() < until else self._pending.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _commit(self, batch: list[tuple[Write, Future[Outcome]]]) -> None:
        futures = [future for _, future in batch]
        try:
            outcomes = batch_writes.apply(self.db, [write for write, _ in batch],
                                          now=self.clock())
        except BaseException as exc:  # noqa: BLE001 - every waiter learns why, none hangs
            for future in futures:
                future.set_exception(exc)
            return
        self.batches += 1
        for future, outcome in zip(futures, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
