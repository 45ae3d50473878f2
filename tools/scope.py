"""What a worker's tools are bound to: one board, one card, one claim token."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

from kanban.errors import LeaseLost
from kanban.service import Kanban
from kanban.state.errors import DatabaseError, TransientDatabaseError
from kanban.state.retry import Backoff, HostFaultPatience, retry_transient
from kanban.state.store import Conn
from kanban.trace_links import pass_trace
from kanban.transitions import Actor, assert_lease

if TYPE_CHECKING:
    from kanban.agent_skills import SkillWriter
    from kanban.review import Verdict
    from kanban.skills import Skill
T = TypeVar("T")
WRITE_RETRY = Backoff(first_s=0.1, cap_s=2.0)
# A worker cut off from the database leaves this long before its lease would lapse (half a
# shorter lease): the dispatcher then hands the card back as the host's fault, where a
# lapsed lease spends one of the card's attempts.
LAPSE_MARGIN_S = 5.0


def _say_retry(exc: TransientDatabaseError, delay: float) -> None:
    print(f"kanban worker: database unavailable ({exc}); retrying in {delay:.1f}s",
          file=sys.stderr, flush=True)


class Deadline(Protocol):
    """The card's own timeout (worker.watchdog), checked by whichever thread watches it."""

    def remaining(self) -> float | None: ...

    def check(self) -> None: ...


@dataclass
class WorkerScope:
    """The worker's own card and lease; every write through it is fenced."""

    kb: Kanban
    board: str
    card_id: int
    claim_token: str
    run_id: int
    lease_s: float = 30.0
    max_depth: int = 1
    max_children_per_card: int = 10
    on_lease_lost: Callable[[str], None] = field(default=lambda message: None)
    # Cut off from the database as the lease runs out (see step_aside_if_lapsing)
    on_cut_off: Callable[[str], None] = field(default=lambda message: None)
    # Runs before the card completes and may add to its summary (a worktree's branch).
    on_complete: Callable[[str], str] = field(default=lambda summary: summary)
    finished: str | None = None  # "completed" | "blocked" once a tool ended the card
    finishing: bool = False  # a tool is ending the card: losing the lease is expected
    skills: Mapping[str, Skill] = field(default_factory=dict)  # what skill_view may show
    skill_files: Mapping[str, list[str]] = field(default_factory=dict)  # in the workspace
    skill_writer: SkillWriter | None = None  # skill_write and skill_patch allowed (issue 33)
    profile: str | None = None  # the card's profile, as skill use records it
    lease_until: datetime | None = None  # as last renewed (by the store's clock)
    # A review gate (issue 19): completing a gated card sends it to review; a verify gate's
    # command runs first, under the lease, and its verdict goes with the completion.
    gated: bool | None = None  # None: not known here (a completion looks it up)
    verify: Callable[[], Verdict] | None = None
    deadline: Deadline | None = None  # checked by the heartbeat thread
    # With telemetry on: the run's span (W3C traceparent), which the cards it makes continue
    traceparent: str | None = None

    @property
    def actor(self) -> Actor:
        return Actor(f"card:#{self.card_id}", self.claim_token)

    def check_lease(self) -> None:
        """Raise LeaseLost once the lease has run out, renewed or not: a worker cut off from
        the database past its lease stops at its next write instead of racing its successor."""
        if self.lease_until is not None and self.kb.clock() >= self.lease_until:
            raise LeaseLost(f"lease on #{self.card_id} expired before it was renewed; "
                            "this worker must stop")

    def step_aside_if_lapsing(self, error: BaseException, wait_s: float = 0.0) -> None:
        """Before waiting `wait_s` for another try while the database is away: with too
        little of the lease left after that wait, stop now (`on_cut_off`: the worker exits
        as the host's fault) rather than let the lease lapse, which the dispatcher counts
        against the card's attempts."""
        if self.lease_until is None:
            return
        try:
            left = (self.lease_until - self.kb.clock()).total_seconds()
        except DatabaseError:
            return  # no clock reading without the server: the lease check stops us later
        if left - wait_s < min(LAPSE_MARGIN_S, self.lease_s / 2):
            detail = str(error).strip().splitlines()[0] if str(error).strip() else \
                type(error).__name__
            self.on_cut_off("the database stayed unreachable as the lease ran out "
                            f"({detail})")

    @contextmanager
    def fenced(self, *, proven: bool = False) -> Iterator[Conn]:
        """A write transaction that first proves this worker still holds its lease;
        `proven`: the change is itself fenced by the claim token (a transition with
        `self.actor`), so no read first."""
        try:
            self.check_lease()
            with self.kb.db.write() as conn:
                if not proven:
                    assert_lease(conn, self.card_id, self.claim_token)
                yield conn
                if self.traceparent is not None:  # in the transaction that made them
                    pass_trace(conn, self.card_id, self.traceparent)
        except LeaseLost as exc:
            self.on_lease_lost(exc.message)
            raise

    def write(self, change: Callable[[Conn], T], *, fenced: bool = True, proven: bool = False,
              idempotent: bool = False) -> T:
        """`change` in a (fenced) write transaction, tried again while the database is away;
        the tries end with the lease (LeaseLost: the worker stops), or after a few seconds
        of a fault of the host (read-only, full, I/O), which the worker reports as such.
        `proven`: as for `fenced`. `idempotent`: `change` finds out itself whether an earlier
        try committed, so a commit whose outcome is in doubt (the server lost during COMMIT)
        is tried again."""

        def once() -> T:
            if fenced:
                with self.fenced(proven=proven) as conn:
                    return change(conn)
            with self.kb.db.write() as conn:
                return change(conn)

        def say(exc: TransientDatabaseError, delay: float) -> None:
            self.step_aside_if_lapsing(exc, delay)
            _say_retry(exc, delay)

        return retry_transient(once, backoff=WRITE_RETRY, idempotent=idempotent,
                               on_retry=HostFaultPatience(then=say))
