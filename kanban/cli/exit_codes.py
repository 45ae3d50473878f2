"""The exit codes of the commands that run agents (`kanban run`, `kanban swarm`, `kanban
dispatch --once`): one table, shown in their --help and in README."""

from __future__ import annotations

import re
from collections.abc import Iterable

from kanban.errors import KanbanError

OK = 0  # the answer is in and every card it relied on ended done
ERROR = 1  # the command could not do its work (one line on stderr says why)
USAGE = 2  # bad options or arguments
LEAD_FAILED = 3  # the lead (a swarm's synthesizer) ended without an answer
TREE_FAILED = 4  # a card it relied on failed, was cancelled or needs a person
BUDGET = 5  # a budget (tokens, cost) stopped the lead or a card it relied on
INTERRUPTED = 130  # Ctrl-C; SIGTERM exits 143 and SIGHUP 129 (128 + the signal)

TABLE = (
    (OK, "the answer is in and every card it relied on ended done"),
    (ERROR, "the command could not run (bad config, no dispatcher, database)"),
    (USAGE, "bad options or arguments"),
    (LEAD_FAILED, "the lead (a swarm's synthesizer) ended without an answer"),
    (TREE_FAILED, "a card it relied on failed, was cancelled or is blocked"),
    (BUDGET, "a token or cost budget stopped the lead or one of its cards"),
    (INTERRUPTED, "interrupted by Ctrl-C (SIGTERM: 143, SIGHUP: 129); nothing is lost"),
)
BUDGET_STOPS = ("token_budget", "cost_budget")
# How a card stopped by a budget is worded: worker/outcome.py ("token budget reached"),
# a tree's budget (kanban/children.py: "the token budget of #1's tree is spent")
BUDGET_WORDS = re.compile(r"budget (reached|of #\d+'s tree is spent)")


def help_epilog() -> str:
    """The table for a command's --help (click keeps \b blocks as they are)."""
    rows = "\n".join(f"  {code:<4}{meaning}" for code, meaning in TABLE)
    return f"\b\nExit codes:\n{rows}"


class Outcome(KanbanError):
    """A run that ended without everything done: its message, and the code from TABLE."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def for_cards(statuses: Iterable[tuple[str, str | None]]) -> int:
    """OK when every (status, error) is done; else BUDGET or TREE_FAILED."""
    failed = [(status, error) for status, error in statuses if status != "done"]
    if not failed:
        return OK
    if any(BUDGET_WORDS.search(error or "") for _, error in failed):
        return BUDGET
    return TREE_FAILED
