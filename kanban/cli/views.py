"""The board view on a terminal (Rich): columns per state, readable at 80 columns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.containers import Lines
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from kanban.activity import describe as describe_activity
from kanban.cli.output import is_terminal
from kanban.cli.plain import STATUS_STYLE, short_reason
from kanban.columns import BoardCard
from kanban.queries import BoardSnapshot
from kanban.state.timeutil import utcnow
from kanban.textsafety import visible
from kanban.when import age, until

MAIN_COLUMNS = ("todo", "ready", "running", "blocked", "done")
# shown when not empty
EXTRA_COLUMNS = ("triage", "review", "waiting", "scheduled", "failed", "cancelled")
TITLE_LINES = 2
FINISHED = frozenset({"done", "failed", "cancelled"})
PIPE_WIDTH = 1_000_000  # piped output is never wrapped


def console() -> Console:
    """A Rich console on stdout: the terminal's width, or unbounded when piped."""
    if is_terminal():
        return Console(highlight=False)
    return Console(highlight=False, width=PIPE_WIDTH, no_color=True)


def cron_name(created_by: str) -> str | None:
    return created_by.removeprefix("cron:") if created_by.startswith("cron:") else None


def render_board(snapshot: BoardSnapshot) -> RenderableType:
    now = snapshot.at or utcnow()
    if snapshot.shown:  # `--status`: the columns asked for, side by side
        return Group(board_header(snapshot), _columns(snapshot, snapshot.statuses, now))
    parts: list[RenderableType] = [board_header(snapshot), _columns(snapshot, MAIN_COLUMNS, now)]
    extra = tuple(s for s in EXTRA_COLUMNS if snapshot.counts.get(s))
    if extra:
        parts.append(_columns(snapshot, extra, now))
    return Group(*parts)


def board_header(snapshot: BoardSnapshot) -> Text:
    total = sum(snapshot.counts.values())
    header = Text.assemble(("board ", "dim"), (snapshot.board, "bold"),
                           (f" · {total} card{'s' if total != 1 else ''}", "dim"))
    if snapshot.pause.paused:
        scope = "global" if snapshot.pause.global_paused else "board"
        if snapshot.pause.global_paused and snapshot.pause.board_paused:
            scope = "global and board"
        header.append(f" · spawning paused ({scope})", "bold red")
    pending = sum(len(commands) for commands in snapshot.approvals.values())
    if pending:
        header.append(f" · {pending} pending approval{'s' if pending != 1 else ''}", "bold red")
    header.append(" · ")
    header.append_text(dispatcher_liveness(snapshot))
    return header


def dispatcher_liveness(snapshot: BoardSnapshot) -> Text:
    pids = [d.pid for d in snapshot.dispatchers]
    if not pids:
        return Text("no dispatcher", "yellow")
    if len(pids) == 1:
        return Text(f"dispatcher: alive (pid {pids[0]})", "green")
    return Text(f"dispatchers: {len(pids)} alive (pids {', '.join(map(str, pids))})", "green")


def _columns(snapshot: BoardSnapshot, statuses: tuple[str, ...], now: datetime) -> Table:
    # One space between columns and none at the edges: 80 columns give five of 15 cells.
    table = Table(box=box.SIMPLE_HEAD, expand=True, show_edge=False, padding=(0, 0),
                  header_style="bold")
    for status in statuses:
        table.add_column(Text.assemble((status, STATUS_STYLE[status]),
                                       (f" {snapshot.counts.get(status, 0)}", "dim")),
                         ratio=1, no_wrap=True, overflow="ellipsis", min_width=8)
    table.add_row(*(_column_cell(snapshot, status, now) for status in statuses))
    return table


def _column_cell(snapshot: BoardSnapshot, status: str, now: datetime) -> RenderableType:
    cards = snapshot.columns.get(status, [])
    lines: list[RenderableType] = []
    for card in cards:
        lines.extend(card_lines(card, now, snapshot.approvals.get(card.id, ())))
    hidden = snapshot.counts.get(status, 0) - len(cards)
    if hidden > 0:
        lines.append(Text(f"+{hidden} more", "dim italic"))
    return ColumnCell(lines)


class ColumnCell:
    """A column's lines as one renderable, laid out once at the column's width.

    A Group of many small renderables makes Rich measure each of them several times
    while sizing the table; the board's columns are sized by ratio, not by content.
    """

    def __init__(self, lines: list[RenderableType]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines:
            if isinstance(line, Clamp):
                yield from line.__rich_console__(console, options)
            elif isinstance(line, Text):
                yield line.copy() if line.no_wrap else line
            else:
                yield line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)


def card_lines(card: BoardCard, now: datetime,
               approvals: Sequence[str] = ()) -> list[RenderableType]:
    """A card: id and facts, its title in up to two lines, then the heartbeat if running
    or the commands waiting for a person's approval."""
    facts = Text.assemble((f"#{card.id}", "bold"))
    if card.priority:
        facts.append(f" p{card.priority}", "magenta")
    facts.append(f" {age(card.updated_at if card.status in FINISHED else card.created_at, now)}",
                 "dim")
    cron = cron_name(card.created_by)
    if cron:
        facts.append(f" ⏰ {cron}", "blue")
    lines: list[RenderableType] = [_clip(facts), Clamp(Text(visible(card.title)), TITLE_LINES)]
    if card.status == "scheduled" and card.run_after is not None:
        lines.append(_clip(Text(f"⏲ {until(card.run_after, now)}", "blue")))
    if card.status == "running":
        beat = Text(f"♥ {age(card.heartbeat_at, now)}", "yellow")
        if card.progress:
            beat.append(" " + visible(" ".join(card.progress.split())), "dim")
        lines.append(_clip(beat))
        doing = describe_activity(card.activity, compact=True)
        if doing:
            lines.append(_clip(Text(f"▸ {visible(doing)}", "cyan")))
    if card.status == "blocked" and card.reason and not approvals:  # else they say why
        lines.append(_clip(Text(f"— {short_reason(card.reason)}", "red")))
    for command in approvals:
        lines.append(_clip(Text(f"⚠ approve: {visible(' '.join(command.split()))}",
                                "bold red")))
    return lines


def _clip(text: Text) -> Text:
    text.no_wrap = True
    text.overflow = "ellipsis"
    return text


class Clamp:
    """Text wrapped to the column, cut to at most `lines` lines with an ellipsis."""

    def __init__(self, text: Text, lines: int) -> None:
        self.text = text
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wrapped = self.text.wrap(console, options.max_width, overflow="ellipsis")
        if len(wrapped) > self.lines:
            wrapped = Lines(wrapped[: self.lines])
            last = wrapped[-1]
            last.rstrip()
            last.append("…")
            last.truncate(options.max_width, overflow="ellipsis")
        yield from wrapped

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)
