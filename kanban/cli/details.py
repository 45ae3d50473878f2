"""Rich views of cards: the list table, one card in full, a run transcript, the status."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.rule import Rule
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kanban.cli.reads import ChildNode, Status, Transcript
from kanban.cli.views import STATUS_STYLE, age
from kanban.records import CardDetail, CardRecord, EventRecord, MessageRecord, RunRecord
from state.timeutil import utcnow

CONTEXT_SHOWN = 2_000
ROLE_STYLE = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "magenta"}


def status_text(status: str) -> Text:
    return Text(status, STATUS_STYLE.get(status, ""))


def card_table(cards: Sequence[CardRecord], now: datetime | None = None) -> RenderableType:
    if not cards:
        return Text("no cards", "dim")
    now = now or utcnow()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, justify in (("id", "right"), ("status", "left"), ("pri", "right"),
                          ("age", "right"), ("title", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "title",  # type: ignore[arg-type]
                         overflow="fold" if name == "title" else "ellipsis")
    for c in cards:
        table.add_row(f"#{c.id}", status_text(c.status), str(c.priority) if c.priority else "",
                      age(c.created_at, now), Text(c.title))
    return table


def card_view(detail: CardDetail, tree: list[ChildNode], now: datetime | None = None,
              ) -> RenderableType:
    now = now or utcnow()
    c = detail.card
    parts: list[RenderableType] = [
        Text.assemble((f"#{c.id} ", "bold"), (c.title, "bold"), "  ", status_text(c.status)),
        _facts(c, now),
    ]
    for label, body, limit in (("goal", c.goal, None), ("context", c.context, CONTEXT_SHOWN),
                               ("result", c.result, None), ("error", c.error, None)):
        if body:
            parts.append(_section(label, body, limit))
    parts.extend(_related("depends on", detail.depends_on))
    parts.extend(_related("dependents", detail.dependents))
    if tree:
        parts.append(_children(c, tree))
    if detail.comments:
        parts.append(Rule("comments", align="left", style="dim"))
        parts.extend(Text.assemble((f"{x.author} · {age(x.at, now)} ago: ", "dim"), x.body)
                     for x in detail.comments)
    if detail.runs:
        parts.append(Rule("runs", align="left", style="dim"))
        parts.append(_runs_table(detail.runs, now))
    if detail.events:
        parts.append(Rule("history", align="left", style="dim"))
        parts.append(_events_table(detail.events))
    return Group(*parts)


def _facts(c: CardRecord, now: datetime) -> Text:
    facts = [f"board {c.board}", f"priority {c.priority}", f"profile {c.profile}",
             f"attempt {c.attempt - c.retry_base}/{c.max_attempts}",
             f"by {c.created_by}", f"created {age(c.created_at, now)} ago"]
    if c.parent_id is not None:
        facts.append(f"parent #{c.parent_id}")
    if c.timeout_s is not None:
        facts.append(f"timeout {c.timeout_s:g}s")
    if c.input_tokens or c.output_tokens:
        facts.append(f"tokens {c.input_tokens:,} in / {c.output_tokens:,} out")
    if c.archived_at is not None:
        facts.append("archived")
    return Text(" · ".join(facts), "dim")


def _section(label: str, body: str, limit: int | None) -> RenderableType:
    shown = body if limit is None or len(body) <= limit else body[:limit]
    parts: list[RenderableType] = [Rule(label, align="left", style="dim"), Text(shown)]
    if shown is not body:
        parts.append(Text(f"… {len(body) - limit:,} more characters (see --json)", "dim"))
    return Group(*parts)


def _related(label: str, cards: Sequence[CardRecord]) -> list[RenderableType]:
    if not cards:
        return []
    lines = [Text.assemble(f"  #{c.id} ", status_text(c.status), f" {c.title}") for c in cards]
    return [Rule(label, align="left", style="dim"), *lines]


def _children(card: CardRecord, nodes: list[ChildNode]) -> RenderableType:
    tree = Tree(Text(f"#{card.id} {card.title}", "bold"))

    def grow(branch: Tree, kids: list[ChildNode]) -> None:
        for node in kids:
            grow(branch.add(Text.assemble(f"#{node.card.id} ", status_text(node.card.status),
                                          f" {node.card.title}")), node.children)

    grow(tree, nodes)
    return Group(Rule("children", align="left", style="dim"), tree)


def _runs_table(runs: Sequence[RunRecord], now: datetime) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("run", "attempt", "outcome", "started", "took", "tokens", "note"):
        table.add_column(name, overflow="fold")
    for r in runs:
        took = age(r.started_at, r.finished_at) if r.finished_at else "running"
        table.add_row(str(r.id), str(r.attempt), r.outcome or "-", f"{age(r.started_at, now)} ago",
                      took, f"{r.input_tokens:,}/{r.output_tokens:,}",
                      Text(r.error or r.progress or ""))
    return table


def _events_table(events: Sequence[EventRecord]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name in ("at", "event", "actor", "details"):
        table.add_column(name, overflow="fold")
    for e in events:
        table.add_row(e.at.strftime("%Y-%m-%d %H:%M:%S"), e.kind, e.actor,
                      Text(_event_details(e.data)))
    return table


def _event_details(data: str) -> str:
    values: dict[str, Any] = json.loads(data or "{}")
    move = f"{values.pop('from', '')} → {values.pop('to')}".lstrip() if "to" in values else ""
    rest = ", ".join(f"{k}={v}" for k, v in values.items() if v not in (None, [], ""))
    return "; ".join(x for x in (move, rest) if x)


def transcript_view(t: Transcript) -> RenderableType:
    if not t.runs:
        return Text(f"#{t.card.id} has no runs yet", "dim")
    parts: list[RenderableType] = []
    for run, messages in t.runs:
        title = (f"run {run.id} · attempt {run.attempt} · {run.outcome or 'running'} · "
                 f"{run.input_tokens:,} in / {run.output_tokens:,} out"
                 f" / {run.cached_tokens:,} cached tokens")
        parts.append(Rule(title, align="left"))
        parts.extend(_message(m) for m in messages)
        if run.error:
            parts.append(Text(f"error: {run.error}", "red"))
    return Group(*parts)


def _message(m: MessageRecord) -> Text:
    label = m.role + (f" {m.name}" if m.name else "")
    text = Text.assemble((f"{label}: ", f"bold {ROLE_STYLE.get(m.role, '')}"), m.content or "")
    for call in json.loads(m.tool_calls) if m.tool_calls else []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", fn.get("input", ""))
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        text.append(f"\n  → {fn.get('name', '?')}({args})", "magenta")
    return text


def status_view(s: Status) -> RenderableType:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("state")
    table.add_column("cards", justify="right")
    for name, n in s.counts.items():
        table.add_row(status_text(name), str(n))
    table.add_row(Text("total", "bold"), str(sum(s.counts.values())))
    if s.paused_globally:
        spawning = Text("spawning: paused globally", "bold red")
    elif s.paused_boards:
        spawning = Text(f"spawning: paused on {', '.join(s.paused_boards)}", "red")
    else:
        spawning = Text("spawning: on", "green")
    now = utcnow()
    dispatchers = [Text(f"dispatcher {d.id}: pid {d.pid} on {d.host}, "
                        f"heartbeat {age(d.heartbeat_at, now)} ago", "green")
                   for d in s.dispatchers] or [Text("no dispatcher", "yellow")]
    scope = f"board {s.board}" if s.board else "all boards"
    from kanban.cli.cron import upcoming_view  # here: cron's imports cost every command

    workers = Text(f"live workers: {s.workers}")
    return Group(Text(scope, "bold"), table, spawning, *dispatchers, workers,
                 upcoming_view(s.next_fires, now))
