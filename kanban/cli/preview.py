"""`kanban context ID`: the prompt, tools, limits and environment a worker would get now."""

from __future__ import annotations

import os

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, json_option, location_of, open_kanban
from kanban.cli.params import card_id_argument


@command()
@card_id_argument()
@json_option
@click.pass_context
def context(ctx: click.Context, card_id: int, as_json: bool) -> None:
    """Print exactly what a worker for this card would be given now (secrets masked).

    Built by the functions the worker itself plans its run with: model, limits, system
    prompt, opening messages, tools, skills, attachments and environment.
    """
    from kanban.worker.preview import preview_worker  # the worker's own planning code

    location = location_of(ctx)
    preview = preview_worker(open_kanban(ctx), card_id, config_of(ctx), os.environ,
                             home=location.home, db_target=location.target)
    data = preview.to_json()
    if as_json:
        output.print_json(data)
        return
    from kanban.cli.report_views import context_lines

    output.out_lines(context_lines(data))
