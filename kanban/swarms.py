"""Swarms: parallel workers on parts of one goal, a verifier after all of them, and a
synthesizer whose result is the swarm's answer, created as one graph in one transaction.

Without given parts, a planning card splits the goal first and every worker depends on it.
The verifier depends on every worker; the synthesizer on the verifier and every worker (so
it reads their results and the verdict). A swarm is known by its synthesizer's id; its
other cards are found from there through the dependencies and their `created_by`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kanban import validation as v
from kanban.cards import NewCard, add_card, card_with_key, get_card
from kanban.children import ChildStatus, children_status
from kanban.control import pause_state, serving_dispatchers
from kanban.errors import ValidationError
from kanban.state.store import Conn, Database
from kanban.states import TERMINAL, CardStatus

MAX_WORKERS = 32
PLANNER, WORKER, VERIFIER, SYNTHESIZER = (
    "swarm:planner", "swarm:worker", "swarm:verifier", "swarm:synthesizer")


@dataclass(frozen=True)
class NewSwarm:
    goal: str
    workers: int | None = None  # default: one per part, else 3
    parts: tuple[str, ...] = ()
    board: str = "default"
    profile: str = "default"  # the workers'
    planner: str = "default"
    verifier: str = "default"
    synthesizer: str = "default"
    skills: tuple[str, ...] = ()  # every worker's
    key: str | None = None  # the synthesizer's: the same key returns the same swarm
    priority: int = 0
    review: str | None = None  # the verifier card's review gate (kanban.review)

    def count(self) -> int:
        v.text(self.goal, "goal", v.MAX_GOAL, required=True)
        n = self.workers if self.workers is not None else (len(self.parts) or 3)
        if self.parts and n != len(self.parts):
            raise ValidationError(f"{len(self.parts)} parts given for {n} workers: give one "
                                  "--part per worker, or leave out --workers")
        if not 1 <= n <= MAX_WORKERS:
            raise ValidationError(f"a swarm has 1 to {MAX_WORKERS} workers, not {n}")
        for part in self.parts:
            v.text(part, "part", v.MAX_GOAL, required=True)
        if self.review is not None:
            from kanban.review import Gate

            Gate.parse(self.review)
        return n


@dataclass(frozen=True)
class Swarm:
    synthesizer: int
    verifier: int
    workers: tuple[int, ...]
    planner: int | None = None
    created: bool = True

    @property
    def cards(self) -> list[int]:
        lead = [self.planner] if self.planner is not None else []
        return [*lead, *self.workers, self.verifier, self.synthesizer]

    def to_json(self) -> dict[str, Any]:
        return {"synthesizer": self.synthesizer, "verifier": self.verifier,
                "workers": list(self.workers), "planner": self.planner,
                "created": self.created}


def create_swarm(conn: Conn, new: NewSwarm, now: datetime) -> Swarm:
    """Every card of the swarm, in the caller's transaction (all of it or none)."""
    n = new.count()
    if new.key is not None and (existing := card_with_key(conn, new.board, new.key)):
        found = swarm_of(conn, existing.id)
        return Swarm(found.synthesizer, found.verifier, found.workers, found.planner, False)
    topic = _first_line(new.goal)

    def card(title: str, goal: str, profile: str, by: str, deps: Sequence[int] = (),
             **extra: Any) -> int:
        return add_card(conn, NewCard(
            title=_title(title), goal=goal, board=new.board, profile=profile, created_by=by,
            depends_on=tuple(deps), priority=new.priority, **extra), now).id

    planner = None
    if not new.parts:
        planner = card(f"Plan: {topic}", _plan_goal(new.goal, n), new.planner, PLANNER)
    workers = [card(f"Part {i} of {n}: {_first_line(part) if new.parts else topic}",
                    _worker_goal(new.goal, i, n, part, planner), new.profile, WORKER,
                    [planner] if planner is not None else [], skills=new.skills)
               for i, part in enumerate(new.parts or [""] * n, start=1)]
    verifier = card(f"Verify: {topic}", _verify_goal(new.goal, workers), new.verifier,
                    VERIFIER, workers, review=new.review)
    synthesizer = card(f"Answer: {topic}", _synthesize_goal(new.goal, workers, verifier),
                       new.synthesizer, SYNTHESIZER, [*workers, verifier], key=new.key)
    return Swarm(synthesizer, verifier, tuple(workers), planner)


def swarm_of(conn: Conn, synthesizer_id: int) -> Swarm:
    """The swarm whose synthesizer is `synthesizer_id`."""
    synthesizer = get_card(conn, synthesizer_id)
    if synthesizer.created_by != SYNTHESIZER:
        raise ValidationError(f"#{synthesizer_id} is not a swarm's synthesizer card")
    deps = _dependencies(conn, synthesizer_id)
    verifiers = [d for d, by in deps if by == VERIFIER]
    workers = tuple(d for d, by in deps if by == WORKER)
    if len(verifiers) != 1:
        raise ValidationError(f"#{synthesizer_id} has lost its verifier card")
    planners = {d for w in workers for d, by in _dependencies(conn, w) if by == PLANNER}
    return Swarm(synthesizer_id, verifiers[0], workers,
                 planners.pop() if len(planners) == 1 else None)


def _dependencies(conn: Conn, card_id: int) -> list[tuple[int, str]]:
    return [(row[0], row[1]) for row in conn.all(
        "SELECT c.id, c.created_by FROM dependency d JOIN card c ON c.id = d.depends_on_id "
        "WHERE d.card_id = :id ORDER BY c.id", {"id": card_id})]


# -- following a swarm until its answer --------------------------------------------------------


@dataclass(frozen=True)
class SwarmResult:
    swarm: Swarm
    answer: str | None
    error: str | None
    statuses: list[ChildStatus]


def follow(db: Database, swarm: Swarm, *, clock: Callable[[], datetime],
           on_progress: Callable[[list[ChildStatus]], None] = lambda statuses: None,
           poll_s: float = 0.1, board: str | None = None,
           keep_served: Callable[[], bool] = lambda: False) -> SwarmResult:
    """Wait until the synthesizer finishes, or the swarm cannot (a card failed, was
    cancelled or needs a person, spawning is paused, or no dispatcher serves the board and
    `keep_served` cannot start one)."""
    while True:
        with db.read() as conn:
            statuses = children_status(conn, swarm.cards)
            board = board or get_card(conn, swarm.synthesizer).board
            serving = serving_dispatchers(conn, board, clock())
            paused = pause_state(conn, board).paused
        on_progress(statuses)
        final = next(s for s in statuses if s.id == swarm.synthesizer)
        if final.status == CardStatus.DONE:
            return SwarmResult(swarm, final.result, None, statuses)
        stuck = [s for s in statuses if s.status in TERMINAL | {CardStatus.BLOCKED}
                 and s.status != CardStatus.DONE]
        if stuck:
            s = stuck[0]
            why = f": {s.error}" if s.error else ""
            return SwarmResult(swarm, None, f"#{s.id} ({s.title}) is {s.status}{why}",
                               statuses)
        if not serving and not keep_served():
            return SwarmResult(swarm, None, f"no live dispatcher serves board {board!r} "
                               "(start `kanban dispatch`)", statuses)
        if paused:
            return SwarmResult(swarm, None, f"spawning is paused; the swarm's cards wait on "
                               f"board {board!r} until `kanban resume`", statuses)
        time.sleep(poll_s)


# -- what each card is asked ------------------------------------------------------------------


def _plan_goal(goal: str, n: int) -> str:
    return (f"Split the goal into exactly {n} independent parts that {n} workers can do at "
            f"the same time.\nComplete your card with a numbered list 1 to {n}: one part per "
            f"line, each understandable on its own.\n\nThe goal:\n{goal}")


def _worker_goal(goal: str, i: int, n: int, part: str, planner: int | None) -> str:
    if planner is not None:
        task = (f"Your card depends on #{planner}, the plan: read its result with "
                f"kanban_show and do part {i} of it, and only that part.")
    else:
        task = f"Your part:\n{part}"
    return (f"Part {i} of {n} of: {_first_line(goal)}\n\nYou are one of {n} workers on this "
            f"goal:\n{goal}\n\n{task}\nComplete your card with the result of your part.")


def _verify_goal(goal: str, workers: Sequence[int]) -> str:
    listed = ", ".join(f"#{w}" for w in workers)
    return (f"Check the workers' results against the goal: {_first_line(goal)}\n\n"
            f"Read the results of your dependencies ({listed}) with kanban_show. For each, "
            "say whether it is correct and complete, and what is wrong or missing. Complete "
            f"your card with that verdict.\n\nThe goal:\n{goal}")


def _synthesize_goal(goal: str, workers: Sequence[int], verifier: int) -> str:
    listed = ", ".join(f"#{w}" for w in workers)
    return (f"Answer the goal: {_first_line(goal)}\n\nCombine the workers' results ({listed}) "
            f"into one answer, following the verifier's verdict (#{verifier}): leave out or "
            "correct what it found wrong. Read them all with kanban_show. Complete your card "
            f"with the answer itself: it is the swarm's answer.\n\nThe goal:\n{goal}")


def _first_line(text: str, limit: int = 120) -> str:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _title(text: str) -> str:
    return text if len(text) <= v.MAX_TITLE else text[: v.MAX_TITLE - 1] + "…"

