"""Group commit: the fenced writes of a process's threads that arrive together (those
queued while a commit is in flight, and those that follow the first within `linger_s`)
commit in one transaction (kanban.batch_writes).

No thread of its own: the first waiter that finds no commit under way leads, committing
everything queued, batch after batch, until the queue is empty; the others wait for their
answer. Each caller is answered only after the commit that holds its write returned, so an
acknowledged completion is never lost; a write refused by its own claim token gets its own
LeaseLost while its batch-mates commit. Never wait while holding a transaction of the
same database in the same thread: the batch's own transaction would wait for it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import datetime

from kanban import batch_writes
from kanban.batch_writes import Outcome, Write
from kanban.state.store import Database

LINGER_S = 0.0  # how long a lone write waits for company before its commit
MAX_BATCH = 64

Ticket = Future  # a submitted write's answer, set once its commit returned


class GroupCommitter:
    """`submit` writes (each gets a Ticket), then `wait` for their answers: a waiter
    commits the queue itself when no commit is under way."""

    def __init__(self, db: Database, clock: Callable[[], datetime], *,
                 linger_s: float = LINGER_S, max_batch: int = MAX_BATCH) -> None:
        self.db = db
        self.clock = clock
        self.linger_s = linger_s
        self.max_batch = max_batch
        self.batches = 0  # commits made, each holding one or more writes
        self._queue: deque[tuple[Write, Ticket[Outcome]]] = deque()
        self._lock = threading.Lock()
        self._leading = False

    def submit(self, write: Write) -> Ticket[Outcome]:
        ticket: Ticket[Outcome] = Future()
        with self._lock:
            self._queue.append((write, ticket))
        return ticket

    def wait(self, ticket: Ticket[Outcome], timeout: float | None = None) -> Outcome:
        """The write's outcome once committed; a refusal (LeaseLost) or failure is raised."""
        self._settle(ticket, None if timeout is None else time.monotonic() + timeout)
        return ticket.result(0)

    def write(self, write: Write, timeout: float | None = None) -> Outcome:
        """Submit and wait."""
        return self.wait(self.submit(write), timeout)

    def write_all(self, writes: Sequence[Write]) -> list[Ticket[Outcome]]:
        """Submit several writes and wait until all are answered (refusals and failures
        stay in their tickets)."""
        tickets = [self.submit(w) for w in writes]
        for ticket in tickets:
            self._settle(ticket, None)
        return tickets

    def _settle(self, ticket: Ticket[Outcome], deadline: float | None) -> None:
        """Until the ticket is answered: lead when no commit is under way, else wait."""
        while not ticket.done():
            with self._lock:
                lead = not self._leading and not ticket.done()
                if lead:
                    self._leading = True
            if lead:
                self._lead()
            else:  # the leader drains the queue, this write included, before it stops
                ticket.exception(None if deadline is None else
                                 max(0.0, deadline - time.monotonic()))

    def _lead(self) -> None:
        """Commit batch after batch until the queue is empty, then step down (under the
        lock, so a write queued before that is always in some batch)."""
        try:
            while True:
                if self.linger_s and len(self._queue) == 1:
                    time.sleep(self.linger_s)
                with self._lock:
                    batch = [self._queue.popleft()
                             for _ in range(min(self.max_batch, len(self._queue)))]
                    if not batch:
                        self._leading = False
                        return
                self._commit(batch)
        except BaseException:
            with self._lock:
                self._leading = False
            raise

    def _commit(self, batch: list[tuple[Write, Ticket[Outcome]]]) -> None:
        tickets = [ticket for _, ticket in batch]
        try:
            outcomes = batch_writes.apply(self.db, [write for write, _ in batch],
                                          now=self.clock())
        except BaseException as exc:  # every waiter of the batch learns why; none hangs
            for ticket in tickets:
                ticket.set_exception(exc)
            if not isinstance(exc, Exception):
                raise  # an interrupt still ends the leading thread
            return
        self.batches += 1
        for ticket, outcome in zip(tickets, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                ticket.set_exception(outcome)
            else:
                ticket.set_result(outcome)
