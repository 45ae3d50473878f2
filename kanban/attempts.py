"""Which attempt of its card's budget each run spent, counted as `kanban show` counts them.

A run's `attempt` column is the card's claim count: every claim adds one. The budget that
`kanban show` reports (`attempt 1/3`) counts only the runs that spent an attempt: a run
that handed its card to a person (blocked), delegated (waiting) or was handed back spent
none, and `kanban retry` or a review round that asks for changes starts a fresh budget.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kanban.records import EventRecord, RunRecord
from kanban.states import Outcome

SPENT_NONE = frozenset({Outcome.BLOCKED, Outcome.WAITING, Outcome.HANDED_BACK})
CLAIMED = "claimed"
FRESH_BUDGET = frozenset({"retry", "changes_requested"})  # the event kinds that reset it
EVENT_KINDS = (CLAIMED, *sorted(FRESH_BUDGET))


def budget_attempts(runs: Sequence[RunRecord],
                    events: Sequence[EventRecord]) -> dict[int, int | None]:
    """By run id: the attempt of its budget it spent (a running run counts, as in
    `kanban show`), or None if it spent none. Where `claimed` events are gone (pruned by
    `kanban gc`), the runs they named, and the later runs of their budget, are left out:
    how many attempts came before them is no longer known."""
    by_id = {run.id: run for run in runs}
    claimed = {e.run_id for e in events if e.kind == CLAIMED}
    unknown = [run for run in by_id.values() if run.id not in claimed]
    found: dict[int, int | None] = {}
    spent, since = 0, None
    for event in events:
        if event.kind in FRESH_BUDGET:
            spent, since = 0, event.at
        elif event.kind == CLAIMED and event.run_id in by_id:
            run = by_id[event.run_id]
            if run.outcome in SPENT_NONE:
                found[run.id] = None
            elif not any(u.id < run.id and (since is None or u.started_at > since)
                         for u in unknown):
                spent += 1
                found[run.id] = spent
    return found


def label(run: RunRecord, attempts: Mapping[int, int | None]) -> str:
    """`attempt 2` of the card's budget, as its facts count them; `no attempt spent`; or,
    where its history was pruned, `claim 5` (the card's fifth claim)."""
    if run.id not in attempts:
        return f"claim {run.attempt}"
    spent = attempts[run.id]
    return "no attempt spent" if spent is None else f"attempt {spent}"


def event_details(event: EventRecord, labels: Mapping[int, str]) -> str:
    """An event's data in a line (`ready → running; attempt 2`). The number a `claimed`
    event stores counts claims: it is shown as its run is labelled (`labels`, by run id),
    else as `claim N`, never as an attempt it may not have spent."""
    values: dict[str, Any] = json.loads(event.data or "{}")
    said = None
    if event.kind == CLAIMED and "attempt" in values:
        claim = values.pop("attempt")
        said = labels.get(event.run_id or 0, f"claim {claim}")
    move = f"{values.pop('from', '')} → {values.pop('to')}".lstrip() if "to" in values else ""
    rest = ", ".join(f"{k}={v}" for k, v in values.items() if v not in (None, [], ""))
    return "; ".join(x for x in (move, said, rest) if x)


def labels(runs: Sequence[RunRecord], attempts: Mapping[int, int | None]) -> dict[int, str]:
    """`label` of each run, by id."""
    return {run.id: label(run, attempts) for run in runs}
