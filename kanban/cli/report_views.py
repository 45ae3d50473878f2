"""Plain-text views of the everyday tools: search hits, a worker's context, stats."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kanban.activity import cost_text
from kanban.cli.output import colour_on, paint
from kanban.cli.plain import STATUS_STYLE, heading, status_word
from kanban.state.sandbox_paths import reach_lines

if TYPE_CHECKING:
    from kanban.search import SearchHit


def search_lines(hits: Sequence[SearchHit], *, show_board: bool) -> list[str]:
    """Each hit: the card on one line, then where it matched with the match marked."""
    if not hits:
        return [paint("no matches", "dim")]
    show_board = show_board and len({h.board for h in hits}) > 1
    lines = []
    for hit in hits:
        head = f"{paint(f'#{hit.card_id}', 'bold')} {status_word(hit.status)} {hit.title}"
        if show_board:
            head += paint(f"  [{hit.board}]", "dim")
        if hit.archived:
            head += paint("  archived", "dim")
        lines.append(head)
        lines.append(f"    {paint(hit.field + ':', 'dim')} {_marked(hit)}")
    return lines


def _marked(hit: SearchHit) -> str:
    """The snippet on one line, matches in bold on a terminal and in **…** elsewhere."""
    from kanban.search import START, STOP

    text = " ".join(hit.snippet.split())
    if colour_on():
        return text.replace(START, "\x1b[1;33m").replace(STOP, "\x1b[0m")
    return text.replace(START, "**").replace(STOP, "**")


def context_lines(data: dict[str, Any]) -> list[str]:
    """`kanban context`: the worker's model, limits, prompt, tools and environment."""
    environment = [heading("environment"), *(f"{k}={v}" for k, v in
                                             data["environment"].items())]
    if data["script"] is not None:
        return [paint(f"#{data['card_id']} is a script card: its worker runs this command in "
                      "its workspace, with no model and no tools", "bold"),
                *data["script"].splitlines(), *environment]
    limits = data["limits"]
    budget = f"{limits['token_budget']:,} tokens" if limits["token_budget"] else "no token cap"
    cost = (f"${limits['max_cost']:g} (spent ${limits['spent_cost']:.4f})"
            if limits["max_cost"] is not None else "no cost cap")
    lines = [
        paint(f"#{data['card_id']}", "bold") + f" board {data['board']} · profile "
        f"{data['profile']} · model {data['model']}"
        + (f" · at {data['endpoint']}" if data.get("endpoint") else ""),
        paint(f"limits: {limits['max_turns']} turns · {budget} · {cost} · "
              f"{limits['timeout_s']:g}s timeout · {limits['lease_s']:g}s lease · "
              f"{limits['attempts_left']} attempts left", "dim"),
        paint(f"toolsets: {', '.join(data['toolsets'])}", "dim"),
        *(paint(line, "dim") for line in reach_lines(data["reach"])),
        heading("system"), *data["system"].splitlines(),
    ]
    for message in data["messages"]:
        lines += [heading(message["role"]), *message["content"].splitlines()]
    lines.append(heading(f"tools ({len(data['tools'])})"))
    for tool in data["tools"]:
        props = tool["parameters"].get("properties", {})
        required = set(tool["parameters"].get("required", []))
        args = ", ".join(name if name in required else f"{name}?" for name in props)
        lines.append(paint(f"{tool['name']}({args})", "bold") + "  "
                     + paint(tool["description"], "dim"))
    for skill in data["skills"]:
        lines.append(paint(f"skill {skill['name']} from {skill['source']}: "
                           f"{len(skill['files'])} other file(s)", "dim"))
    return lines + environment


def stats_lines(data: dict[str, Any]) -> list[str]:
    """`kanban stats` for people: counts, the queue, throughput and spend."""
    states = [name for name, n in data["by_state"].items() if n]
    width = max([len(f"profile {p}") for p in data["by_profile"]]
                + [len(f"board {b}") for b in data["by_board"]] + [5])
    lines = [paint(f"board {data['board']}" if data["board"] else "all boards", "bold"),
             " " * width + "".join(f"  {paint(s.rjust(max(len(s), 7)), STATUS_STYLE[s])}"
                                   for s in states) + f"  {'total':>7}"]

    def row(label: str, by: dict[str, int], total: int) -> str:
        return label.ljust(width) + "".join(f"  {by.get(s, 0):>{max(len(s), 7)},}"
                                            for s in states) + f"  {total:>7,}"

    lines.append(row("all", data["by_state"], data["total"]))
    for label, groups in (("board", data["by_board"]), ("profile", data["by_profile"])):
        lines += [row(f"{label} {name}", by, sum(by.values()))
                  for name, by in sorted(groups.items())]
    age = data["oldest_ready_age_s"]
    lines.append(paint(f"oldest ready card waiting: {_seconds(age)}" if age is not None
                       else "no card waiting to be claimed", "dim"))
    lines.append(paint("last   done  failed  cancelled  failure rate  tokens in/out/cached"
                       "      cost", "dim"))
    for name, w in data["last"].items():
        rate = f"{w['failure_rate']:.0%}" if w["failure_rate"] is not None else "-"
        lines.append(f"{name:<5}  {w['done']:>4,}  {w['failed']:>6,}  {w['cancelled']:>9,}  "
                     f"{rate:>12}  {_tokens(w['tokens']):>20}  {_cost(w):>8}")
    lines.append(paint(f"all time: {_tokens(data['tokens'])} tokens · cost {_cost(data)}",
                       "dim"))
    return lines


def _cost(spend: dict[str, Any]) -> str:
    """Dollars, saying how many calls had no price (they are not counted as free)."""
    return cost_text(spend["cost"], spend["unpriced_calls"])


def _tokens(t: dict[str, int]) -> str:
    return f"{t['input']:,}/{t['output']:,}/{t['cached']:,}"


def _seconds(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"
