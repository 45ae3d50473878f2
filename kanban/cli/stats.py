"""`kanban stats`: counts, queue age, throughput, failure rate, tokens and cost."""

from __future__ import annotations

import click

from kanban.cli import output
from kanban.cli.base import board_filter, command, json_option, open_kanban


@command()
@json_option
@click.pass_context
def stats(ctx: click.Context, as_json: bool) -> None:
    """Cards per state, board and profile; queue age; throughput, failures, tokens, cost.

    Throughput and the failure rate (failed / (done + failed)) cover the last hour and
    day. Every board unless --board is given.
    """
    data = open_kanban(ctx).stats(board=board_filter(ctx)).to_json()
    if as_json:
        output.print_json(data)
        return
    from kanban.cli.report_views import stats_lines

    output.out_lines(stats_lines(data))
