"""Plain-text views: card lines, one card in full, a transcript (`kanban status` and
`kanban workers`: kanban.cli.status_text).

Lines are never wrapped or cut (the terminal wraps; a pipe gets whole lines), times are
labelled, and colour appears only on a terminal. No Rich: these paths start fast.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from kanban.activity import cost_text
from kanban.activity import describe as describe_activity
from kanban.attempts import budget_attempts, event_details, labels
from kanban.attempts import label as attempt_label
from kanban.cli.output import one_line, paint, plural, when
from kanban.state.timeutil import utcnow
from kanban.states import error_label
from kanban.textsafety import visible
from kanban.when import age, until

if TYPE_CHECKING:
    from kanban.approvals import ApprovalRecord
    from kanban.children import TreeTotals
    from kanban.readmodels import ChildNode, Transcript
    from kanban.records import CardDetail, CardRecord, EventRecord, MessageRecord, RunRecord

STATUS_STYLE = {
    "scheduled": "blue", "todo": "white", "ready": "cyan", "running": "yellow", "blocked": "red",
    "waiting": "magenta", "done": "green", "failed": "bold red", "cancelled": "dim",
    "triage": "bright_blue", "review": "bright_magenta",
}
STATUS_WIDTH = max(len(s) for s in STATUS_STYLE)
CONTEXT_SHOWN = 2_000  # on a terminal; a pipe gets it whole
# Of a blocked card's reason in `kanban list` and `board`; `show` and `list --json` have it
# whole, board JSON its first columns.REASON_CHARS.
REASON_SHOWN = 80
ROLE_STYLE = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "magenta"}


def status_word(status: str, width: int = 0) -> str:
    return paint(status.ljust(width), STATUS_STYLE.get(status, ""))


# -- kanban list --------------------------------------------------------------------------------


class CardLines:
    """`#id  status  pri  age  title`, aligned by fixed widths so lines can stream; a blocked
    card's line ends with why it is blocked."""

    def __init__(self, now: datetime, id_width: int, pri_width: int = 3) -> None:
        self.now = now
        self.id_width = id_width + 1  # the '#'
        self.pri_width = pri_width

    def header(self) -> str:
        return paint(f"{'id':>{self.id_width}}  {'status':<{STATUS_WIDTH}}  "
                     f"{'pri':>{self.pri_width}}  {'age':>4}  title", "dim")

    def line(self, card: CardRecord) -> str:
        pri = str(card.priority) if card.priority else ""
        return (f"{'#' + str(card.id):>{self.id_width}}  {status_word(card.status, STATUS_WIDTH)}"
                f"  {pri:>{self.pri_width}}  {age(card.created_at, self.now):>4}  {card.title}"
                + _blocked_because(card))

    def lines(self, cards: Iterable[CardRecord]) -> Iterator[str]:
        return (self.line(card) for card in cards)


def _blocked_because(card: CardRecord) -> str:
    return blocked_because(card.status, card.error)


def blocked_because(status: str, error: str | None) -> str:
    """`  — reason` for a blocked card: one line, cut to REASON_SHOWN, controls spelled out
    (a worker's model may have written it)."""
    if status != "blocked" or not error:
        return ""
    return "  " + paint(f"— {short_reason(error)}", "red")


def short_reason(error: str) -> str:
    reason = one_line(error)
    if len(reason) > REASON_SHOWN:
        reason = reason[:REASON_SHOWN - 1].rstrip() + "…"
    return visible(reason, one_line=True)


def card_lines_for(cards: Sequence[CardRecord], now: datetime | None = None) -> CardLines:
    widest_id = max((len(str(c.id)) for c in cards), default=1)
    widest_pri = max((len(str(c.priority)) for c in cards if c.priority), default=3)
    return CardLines(now or utcnow(), widest_id, max(3, widest_pri))


# -- kanban show --------------------------------------------------------------------------------


def heading(label: str) -> str:
    return paint(f"── {label} ──", "dim")


def card_view(detail: CardDetail, tree: list[ChildNode], *, full: bool,
              now: datetime | None = None, approvals: Sequence[ApprovalRecord] = (),
              totals: TreeTotals | None = None) -> list[str]:
    """One card in full; `full` shows long context whole (always so when piped)."""
    now = now or utcnow()
    c = detail.card
    lines = [f"{paint(f'#{c.id} {c.title}', 'bold')}  {status_word(c.status)}",
             _facts(c, now, unpriced=sum(r.unpriced_calls for r in detail.runs))]
    for label, body in (("script", c.command), ("goal", c.goal), ("context", c.context),
                        ("result", c.result), (error_label(c.status), c.error)):
        if body:
            lines += _section(label, body, None if full or label != "context" else CONTEXT_SHOWN)
    if c.review:
        lines += _section("review gate", f"{c.review} (rounds that asked for changes: "
                                         f"{c.reviews} of {c.max_reviews})", None)
    if c.feedback:
        lines += _section("review feedback", c.feedback, None)
    if detail.attachments:
        lines.append(heading("attachments"))
        lines += [f"  {a.name}  " + paint(f"{size_text(a.size)} · {a.media_type} · sha256 "
                                           f"{a.sha256[:12]}", "dim")
                  for a in detail.attachments]
    lines += _related("depends on", detail.depends_on)
    lines += _dependency_policy(detail)
    lines += _related("dependents", detail.dependents)
    if tree:
        lines += [heading("children"), f"#{c.id} {c.title}", *_tree(tree, "")]
        if totals is not None:
            lines.append(paint(f"tree: {plural(totals.cards, 'card')} · "
                               f"{plural(totals.turns, 'turn')} · {totals.tokens:,} tokens · "
                               f"{cost_text(totals.cost, totals.unpriced)}", "dim"))
    if approvals:
        lines += [heading("approvals"), *(_approval_line(a) for a in approvals)]
    if detail.comments:
        lines.append(heading("comments"))
        lines += [f"{paint(f'{x.author} · {when(x.at)}:', 'dim')} {x.body}"
                  for x in detail.comments]
    attempts = budget_attempts(detail.runs, detail.events)
    if detail.runs:
        lines += [heading("runs"), *_runs(detail.runs, attempts, now)]
    if detail.events:
        run_labels = labels(detail.runs, attempts)
        lines += [heading("history"), *(_event_line(e, run_labels) for e in detail.events)]
    return lines


def _facts(c: CardRecord, now: datetime, *, unpriced: int = 0) -> str:
    facts = [f"board {c.board}", f"priority {c.priority}", f"profile {c.profile}",
             f"workspace {c.workspace or 'scratch'}",
             f"attempt {c.attempt - c.retry_base}/{c.max_attempts}",
             f"by {c.created_by}", f"created {when(c.created_at)} ({age(c.created_at, now)} ago)"]
    if c.status == "scheduled":
        facts.insert(0, f"scheduled for {when(c.run_after)} ({until(c.run_after, now)})")
    if c.status == "waiting" and c.waiting_on:
        waits = json.loads(c.waiting_on).get("children", [])
        facts.insert(0, "waiting on " + ", ".join(f"#{i}" for i in waits))
    if c.role != "leaf":
        facts.append(f"role {c.role}")
    if c.key is not None:
        facts.append(f"key {c.key}")
    if c.skills:
        facts.append(f"skills {c.skills.replace(',', ', ')}")
    if c.parent_id is not None:
        facts.append(f"parent #{c.parent_id}")
    if c.toolsets:
        facts.append(f"toolsets {c.toolsets}")
    if c.timeout_s is not None:
        facts.append(f"timeout {c.timeout_s:g}s")
    if c.input_tokens or c.output_tokens:
        facts.append(f"tokens {c.input_tokens:,} in / {c.output_tokens:,} out")
    if c.cost or unpriced:
        facts.append(f"cost {cost_text(c.cost, unpriced)}")
    if c.archived_at is not None:
        facts.append("archived")
    return paint(" · ".join(facts), "dim")


def _approval_line(a: ApprovalRecord) -> str:
    by = f" by {a.decided_by}" if a.decided_by else ""
    why = f" ({a.reason})" if a.reason else ""
    return f"  {a.decision}{by}{why}: {a.command}  {paint(f'[{a.pattern}]', 'dim')}"


def size_text(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    return f"{size / 1024:.1f} KiB" if size < 2**20 else f"{size / 2**20:.1f} MiB"


def _section(label: str, body: str, limit: int | None) -> list[str]:
    shown = body if limit is None or len(body) <= limit else body[:limit]
    lines = [heading(label), *shown.splitlines()]
    if limit is not None and len(body) > limit:
        lines.append(paint(f"… {len(body) - limit:,} more characters (pipe it, or --json)",
                           "dim"))
    return lines


def _related(label: str, cards: Sequence[CardRecord]) -> list[str]:
    if not cards:
        return []
    return [heading(label), *(f"  #{c.id} {status_word(c.status)} {c.title}" for c in cards)]


_POLICY_MEANS = {
    "block": "this card is blocked, naming it; retrying or completing it requeues this card",
    "cancel": "this card is cancelled, naming it, and stays cancelled if it is retried "
              "(`kanban retry {id}` requeues this card)",
}


def _dependency_policy(detail: CardDetail) -> list[str]:
    """What happens to the card when a dependency fails (shown when it has one, or a policy
    of its own)."""
    c = detail.card
    if not detail.depends_on and c.on_dependency_failure is None:
        return []
    policy = detail.on_dependency_failure
    source = "this card's setting" if c.on_dependency_failure else "the board's default"
    means = _POLICY_MEANS.get(policy, "").format(id=c.id)
    return [paint(f"  if a dependency fails or is cancelled: {policy} ({source}): {means}",
                  "dim")]


def _tree(nodes: list[ChildNode], indent: str) -> Iterator[str]:
    for n, node in enumerate(nodes):
        last = n == len(nodes) - 1
        yield f"{indent}{'└── ' if last else '├── '}#{node.card.id} " \
              f"{status_word(node.card.status)} {node.card.title}"
        yield from _tree(node.children, indent + ("    " if last else "│   "))


def _runs(runs: Sequence[RunRecord], attempts: dict[int, int | None],
          now: datetime) -> Iterator[str]:
    for r in runs:
        took = age(r.started_at, r.finished_at) if r.finished_at else "running"
        note = one_line(r.error or r.progress or "")
        if r.finished_at is None and r.activity:
            note = " · ".join(x for x in (describe_activity(r.activity), r.progress) if x)
        yield (f"  run {r.id} · {attempt_label(r, attempts)} · {r.outcome or '-'} · started "
               f"{when(r.started_at)} · took {took} · tokens {r.input_tokens:,}/"
               f"{r.output_tokens:,} · cost {cost_text(r.cost, r.unpriced_calls)}"
               + (f" · {note}" if note else ""))


def _event_line(e: EventRecord, run_labels: dict[int, str]) -> str:
    details = one_line(event_details(e, run_labels))
    return f"  {when(e.at)}  {e.kind}  {paint(e.actor, 'dim')}" + (f"  {details}" if details
                                                                    else "")


# -- kanban log ---------------------------------------------------------------------------------


def transcript_lines(t: Transcript, *, reasoning: bool = False) -> list[str]:
    """Each run's messages; reasoning in full with `reasoning`, else its size only."""
    if not t.runs:
        return [paint(f"#{t.card.id} has no runs yet", "dim")]
    lines: list[str] = []
    for run, messages in t.runs:
        lines.append(heading(
            f"run {run.id} · {attempt_label(run, t.attempts)} · {run.outcome or 'running'} · "
            f"started {when(run.started_at)} · {run.input_tokens:,} in / "
            f"{run.output_tokens:,} out / {run.cached_tokens:,} cached tokens · "
            f"cost {cost_text(run.cost, run.unpriced_calls)}"))
        found = t.continued.get(run.id)
        if found is not None:  # its copy of the earlier conversation is shown there, once
            lines.append(paint(f"(continues run {found.from_run}: its {found.inherited:,} "
                               "message(s) above are not repeated)", "dim italic"))
        for m in messages[t.inherited(run.id):]:
            lines += _message(m, reasoning)
        if run.error:
            lines.append(paint(f"error: {run.error}", "red"))
    return lines


def _message(m: MessageRecord, reasoning: bool = False) -> list[str]:
    label = m.role + (f" {m.name}" if m.name else "")
    if m.model and m.role == "assistant":
        label += f" ({m.model})"
    thought = ""
    if m.reasoning and reasoning:
        thought = paint(f"[reasoning]\n{m.reasoning}\n[/reasoning]", "dim italic") + "\n"
    elif m.reasoning:
        thought = paint(f"[reasoning: {len(m.reasoning):,} characters; --reasoning shows it]",
                        "dim italic") + " "
    content = paint(m.content or "", "red" if m.is_error else "")
    text = f"{paint(label + ':', 'bold ' + ROLE_STYLE.get(m.role, ''))} {thought}{content}"
    out = text.splitlines() or [""]
    for call in json.loads(m.tool_calls) if m.tool_calls else []:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        args = fn.get("arguments", fn.get("input", ""))
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        out.append(paint(f"  → {fn.get('name', '?')}({args})", "magenta"))
    return out


def count_line(shown: int, total: int, what: str = "card") -> str:
    return f"{plural(shown, what)} of {total:,}"
