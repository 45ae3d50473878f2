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
    # Review gates and triage (issue 19)
    REVIEW = "review"  # completed by its worker; its gate decides done or another attempt
    TRIAGE = "triage"  # a rough idea waiting for a decomposer to split it into cards


TERMINAL = frozenset({CardStatus.DONE, CardStatus.FAILED, CardStatus.CANCELLED})
UNFINISHED = frozenset(CardStatus) - TERMINAL

# Every state in the board's column order: the one list that the board's columns, the
# status filters (`list`, `search`, `board`, the web board and its API) and counts follow.
BOARD_ORDER: tuple[CardStatus, ...] = (
    CardStatus.TRIAGE, CardStatus.SCHEDULED, CardStatus.TODO, CardStatus.READY,
    CardStatus.RUNNING, CardStatus.REVIEW, CardStatus.WAITING, CardStatus.BLOCKED,
    CardStatus.DONE, CardStatus.FAILED, CardStatus.CANCELLED,
)
STATUS_NAMES: tuple[str, ...] = tuple(s.value for s in BOARD_ORDER)
assert set(BOARD_ORDER) == set(CardStatus), "every state has its place on the board"


def error_label(status: str) -> str:
    """What a card's `error` is, said in its view: why it is blocked (a person's, an agent's
    or a failed dependency's reason), else what went wrong."""
    return "blocked because" if status == CardStatus.BLOCKED else "error"


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
    # Review gates and triage (issue 19)
    SUBMIT = "submit"  # a gated card's worker completed: its gate decides
    PASS = "pass"  # the gate passed: done
    CHANGES = "changes"  # the gate asked for changes: another attempt, or out of rounds
    DECOMPOSE = "decompose"  # a triaged card was split into child cards
    TRIAGE = "triage"  # a card nobody started goes to a decomposer


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
    # Review gates and triage (issue 19)
    Action.SUBMIT: frozenset({S.RUNNING}),
    Action.PASS: frozenset({S.REVIEW}),
    Action.CHANGES: frozenset({S.REVIEW}),
    Action.DECOMPOSE: frozenset({S.TRIAGE}),
    Action.TRIAGE: frozenset({S.READY, S.TODO, S.TRIAGE}),  # again: its decomposer failed
}

_REASONS = {
    Action.COMPLETE: "only running, ready or blocked cards can be completed",
    Action.BLOCK: "only todo, ready or running cards can be blocked",
    Action.UNBLOCK: "only blocked cards can be unblocked",
    Action.CANCEL: "it is already finished",
    Action.RETRY: "only done, failed or cancelled cards can be retried",
    Action.ARCHIVE: "only done, failed or cancelled cards can be archived",
    Action.PASS: "only cards in review can be approved",
    Action.CHANGES: "only cards in review can be sent back",
    Action.DECOMPOSE: "only cards in triage can be decomposed",
    Action.TRIAGE: "only cards nobody has started (ready, todo, triage) can be triaged",
}

# How a refusal names the action where its value is no verb of its own.
_VERBS = {
    Action.PASS: "approve",
    Action.CHANGES: "send back",
    Action.HAND_BACK: "hand back",
    Action.SUBMIT: "submit for review",
}


def check(action: Action, status: str, card_id: int) -> None:
    """Raise InvalidTransition unless `action` is allowed from `status`."""
    if CardStatus(status) in ALLOWED[action]:
        return
    allowed = " or ".join(sorted(state.value for state in ALLOWED[action]))
    reason = _REASONS.get(action, f"{verb(action)} needs a card that is {allowed}")
    raise InvalidTransition(f"cannot {verb(action)} #{card_id}: it is {status} ({reason})")


def verb(action: Action) -> str:
    """How a sentence names `action` (`hand back`, not `hand_back`)."""
    return _VERBS.get(action, str(action))
