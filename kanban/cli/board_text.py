"""The board as plain lines, for pipes: a block per state, whole titles, no Rich."""

from __future__ import annotations

from datetime import datetime

from kanban.activity import describe as describe_activity
from kanban.cli.output import one_line, paint, plural
from kanban.cli.plain import blocked_because, status_word
from kanban.columns import BoardCard
from kanban.queries import BoardSnapshot
from kanban.state.timeutil import utcnow
from kanban.when import age, until

FINISHED = frozenset({"done", "failed", "cancelled"})


def header(snapshot: BoardSnapshot) -> str:
    parts = [f"board {snapshot.board}", plural(sum(snapshot.counts.values()), "card")]
    if snapshot.pause.paused:
        scope = "global" if snapshot.pause.global_paused else "board"
        if snapshot.pause.global_paused and snapshot.pause.board_paused:
            scope = "global and board"
        parts.append(f"spawning paused ({scope})")
    pending = sum(len(commands) for commands in snapshot.approvals.values())
    if pending:
        parts.append(plural(pending, "pending approval"))
    pids = [str(d.pid) for d in snapshot.dispatchers]
    if not pids:
        parts.append("no dispatcher")
    elif len(pids) == 1:
        parts.append(f"dispatcher: alive (pid {pids[0]})")
    else:
        parts.append(f"dispatchers: {len(pids)} alive (pids {', '.join(pids)})")
    if any(d.breaker is not None for d in snapshot.dispatchers):
        parts.append("circuit breaker open: not claiming")
    return " · ".join(parts)


def board_lines(snapshot: BoardSnapshot) -> list[str]:
    now = snapshot.at or utcnow()
    lines = [header(snapshot)]
    for status in snapshot.statuses:
        count = snapshot.counts.get(status, 0)
        if not count and not snapshot.shown and status in ("scheduled", "failed", "cancelled"):
            continue
        lines.append(f"{status_word(status)} {count:,}")
        cards = snapshot.columns.get(status, [])
        for card in cards:
            waits_for = snapshot.approvals.get(card.id, ())
            # a card blocked on an approval: the command it waits for says why
            lines.append(f"  {card_line(card, now, reason=not waits_for)}")
            lines += [f"    ⚠ approve: {one_line(command)}" for command in waits_for]
        if count > len(cards):
            lines.append(paint(f"  +{count - len(cards):,} more", "dim"))
    return lines


def card_line(card: BoardCard, now: datetime, *, reason: bool = True) -> str:
    since = card.updated_at if card.status in FINISHED else card.created_at
    facts = [f"#{card.id}"]
    if card.priority:
        facts.append(f"p{card.priority}")
    facts.append(age(since, now))
    if card.created_by.startswith("cron:"):
        facts.append(f"cron {card.created_by.removeprefix('cron:')}")
    line = f"{' '.join(facts)}  {card.title}"
    if card.status == "scheduled" and card.run_after is not None:
        line += f"  ⏲ {until(card.run_after, now)}"
    if reason:
        line += blocked_because(card.status, card.reason)
    if card.status == "running":
        beat = f"♥ {age(card.heartbeat_at, now)}"
        line += f"  {beat}" + (f" {one_line(card.progress)}" if card.progress else "")
        doing = describe_activity(card.activity, compact=True)
        if doing:
            line += f"  ▸ {doing}"
    return line
