"""Shell completion of values: card ids, boards, profiles and cron job names.

Completion runs inside the shell's prompt: every lookup is one quick read, and any
failure (no database yet, a bad config) completes nothing rather than printing errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from click.shell_completion import CompletionItem

from kanban.cli.context import board_filter, config_of, open_kanban

MAX_ITEMS = 200


def _quietly(lookup: Callable[[], list[CompletionItem]]) -> list[CompletionItem]:
    try:
        return lookup()[:MAX_ITEMS]
    except Exception:
        return []


def _kanban(ctx: click.Context) -> Any:
    return open_kanban(ctx)


def card_ids(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """Unfinished cards of the board first (newest first), with their titles as help."""
    from kanban.card_filter import CardFilter

    def lookup() -> list[CompletionItem]:
        prefix = incomplete.removeprefix("#")
        flt = CardFilter(board=board_filter(ctx),
                         statuses=("todo", "ready", "running", "blocked"))
        page = _kanban(ctx).card_page(flt, MAX_ITEMS * 5)
        return [CompletionItem(str(c.id), help=f"{c.status}: {c.title}") for c in page.cards
                if str(c.id).startswith(prefix)]

    return _quietly(lookup)


def boards(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    return _quietly(lambda: [CompletionItem(str(b["name"])) for b in _kanban(ctx).boards()
                             if str(b["name"]).startswith(incomplete)])


def profiles(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    return _quietly(lambda: [CompletionItem(name) for name in sorted(config_of(ctx).profiles)
                             if name.startswith(incomplete)])


def cron_jobs(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    from kanban.cron.service import CronJobs

    def lookup() -> list[CompletionItem]:
        kb = _kanban(ctx)
        return [CompletionItem(job.name, help=job.schedule)
                for job in CronJobs(kb.db, clock=kb.clock).jobs()
                if job.name.startswith(incomplete)]

    return _quietly(lookup)
