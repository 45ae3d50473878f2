"""The card state machine: the only statement of which transitions are allowed."""

from __future__ import annotations

from enum import StrEnum

from kanban.errors import InvalidTransition


class CardStatus(StrEnum):
    SCHEDULED = "scheduled"
    TODO = "todo"
    READY = "ready"
    RUNNING = "running"
    BLOCKED = "blocked"
    WAITING = "waiting"  # on the children it delegated to; holds no worker
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({CardStatus.DONE, CardStatus.FAILED, CardStatus.CANCELLED})
UNFINISHED = frozenset(CardStatus) - TERMINAL


class Action(StrEnum):
    PROMOTE = "promote"
    RELEASE = "release"  # a scheduled card's time came
    CLAIM = "claim"
    COMPLETE = "complete"
    BLOCK = "block"
    UNBLOCK = "unblock"
    REQUEUE = "requeue"
    HAND_BACK = "hand_back"
    FAIL = "fail"
    CANCEL = "cancel"
    RETRY = "retry"
    ARCHIVE = "archive"
    WAIT = "wait"  # a run delegated: the card waits on its children
    RESUME = "resume"  # the children it waited on finished


class Outcome(StrEnum):
    """How a run ended."""

    COMPLETED = "completed"
    BLOCKED = "blocked"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    LEASE_LOST = "lease_lost"
    HANDED_BACK = "handed_back"  # returned unfinished through no fault of the card
    CANCELLED = "cancelled"
    FAILED = "failed"
    WAITING = "waiting"  # delegated; the conversation resumes when the children finish


S = CardStatus
ALLOWED: dict[Action, frozenset[CardStatus]] = {
    Action.PROMOTE: frozenset({S.TODO}),
    Action.RELEASE: frozenset({S.SCHEDULED}),
    Action.CLAIM: frozenset({S.READY}),
    # By hand a person may also finish a card nobody is working on.
    Action.COMPLETE: frozenset({S.RUNNING, S.READY, S.BLOCKED}),
    Action.BLOCK: frozenset({S.RUNNING, S.READY, S.TODO}),
    Action.UNBLOCK: frozenset({S.BLOCKED}),
    Action.REQUEUE: frozenset({S.RUNNING}),
    Action.HAND_BACK: frozenset({S.RUNNING}),
    Action.FAIL: frozenset({S.RUNNING}),
    Action.CANCEL: UNFINISHED,
    Action.RETRY: TERMINAL,
    Action.ARCHIVE: TERMINAL,
    Action.WAIT: frozenset({S.RUNNING}),
    Action.RESUME: frozenset({S.WAITING}),
}

_REASONS = {
    Action.COMPLETE: "only running, ready or blocked cards can be completed",
    Action.BLOCK: "only todo, ready or running cards can be blocked",
    Action.UNBLOCK: "only blocked cards can be unblocked",
    Action.CANCEL: "it is already finished",
    Action.RETRY: "only done, failed or cancelled cards can be retried",
    Action.ARCHIVE: "only done, failed or cancelled cards can be archived",
}


def check(action: Action, status: str, card_id: int) -> None:
    """Raise InvalidTransition unless `action` is allowed from `status`."""
    if CardStatus(status) in ALLOWED[action]:
        return
    reason = _REASONS.get(action, f"{action} needs one of: {sorted(ALLOWED[action])}")
    raise InvalidTransition(f"cannot {action} #{card_id}: it is {status} ({reason})")
