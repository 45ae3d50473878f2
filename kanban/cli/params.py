"""Parameter types and options shared by several commands."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from kanban.validation import MAX_ID


class CardIdType(click.ParamType):
    """A card id as typed: `12` or `#12`; completes to the board's unfinished cards."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().removeprefix("#")
        if not (text.isascii() and text.isdigit()):  # int() also reads "١" as 1
            self.fail(f"{value!r} is not a card id (a number such as 12 or #12)", param, ctx)
        if int(text) > MAX_ID:
            self.fail(f"{value!r} is too large to be a card id", param, ctx)
        return int(text)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[Any]:
        from kanban.cli.completion import card_ids

        return card_ids(ctx, incomplete)


CARD_ID = CardIdType()


def card_id_argument(name: str = "card_id", metavar: str = "ID") -> Any:
    return click.argument(name, type=CARD_ID, metavar=metavar)


def complete_profiles(ctx: click.Context, param: click.Parameter,
                      incomplete: str) -> list[Any]:
    from kanban.cli.completion import profiles

    return profiles(ctx, incomplete)


def complete_cron_jobs(ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[Any]:
    from kanban.cli.completion import cron_jobs

    return cron_jobs(ctx, incomplete)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class SinceType(click.ParamType):
    """A point in time: a duration back from now (`30m`, `2h`, `3d`) or an ISO time
    (local time unless it carries an offset)."""

    name = "since"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        match = _DURATION.match(text)
        if match:
            seconds = float(match.group(1)) * _UNIT[match.group(2)]
            return datetime.now(UTC) - timedelta(seconds=seconds)
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{value!r} is neither a duration (30m, 2h, 3d) nor an ISO time "
                      "(2025-07-01 or 2025-07-01T09:00)", param, ctx)
        return (at if at.tzinfo else at.astimezone()).astimezone(UTC)


SINCE = SinceType()


def dependency_policy_option(help_text: str, *, board: bool = False) -> Any:
    """--on-dependency-failure block|cancel (kanban.dependency_failure); with `board`, also
    `board` (an edit back to the board's policy)."""
    from kanban.validation import BOARD_POLICY, DEPENDENCY_POLICIES

    choices = (*DEPENDENCY_POLICIES, BOARD_POLICY) if board else DEPENDENCY_POLICIES
    return click.option("--on-dependency-failure", "on_dependency_failure", default=None,
                        type=click.Choice(choices), help=help_text)


CARD_POLICY_HELP = ("When a dependency fails or is cancelled: block (wait, blocked, for its "
                    "retry) or cancel (cancel this card too); default: the board's.")
EDIT_POLICY_HELP = ("When a dependency fails or is cancelled: block (wait, blocked, for its "
                    "retry), cancel (cancel this card too) or board (follow the board's again).")
