"""`kanban attach` and `kanban attachments`: files stored with a card."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, group, json_option, location_of, open_kanban
from kanban.cli.params import card_id_argument

if TYPE_CHECKING:
    from kanban.attachments import Attachments


def _attachments(ctx: click.Context) -> Attachments:
    from kanban.attachments import Attachments

    limit = int(config_of(ctx).limits.max_attachment_mb * 2**20)
    kanban = open_kanban(ctx)
    return Attachments(kanban.db, location_of(ctx).home, max_bytes=limit, clock=kanban.clock)


@command()
@card_id_argument()
@click.argument("file", type=click.Path(path_type=Path, dir_okay=True))
@click.option("--name", default=None, help="The name it goes by (default: the file's name).")
@json_option
@click.pass_context
def attach(ctx: click.Context, card_id: int, file: Path, name: str | None,
           as_json: bool) -> None:
    """Store a file with a card; its worker finds it read-only in its workspace.

    FILE is copied beside the database (by content, mode 0600, never executed); the
    [limits] max_attachment_mb of config.toml caps its size.
    """
    record, created = _attachments(ctx).add(card_id, file, name=name)
    if as_json:
        output.print_json({**record.to_json(), "created": created})
    elif created:
        output.out(f"attached {record.name} ({record.size:,} bytes) to #{card_id}")
    else:
        output.out(f"#{card_id} already has {record.name} with the same content")


@group(invoke_without_command=False)
def attachments() -> None:
    """List and remove the files stored with cards."""


@attachments.command("list")
@card_id_argument()
@json_option
@click.pass_context
def list_attachments(ctx: click.Context, card_id: int, as_json: bool) -> None:
    """List a card's attachments: name, size, media type, sha256."""
    store = _attachments(ctx)
    records = store.list(card_id)
    if as_json:
        output.print_json({"card_id": card_id, "attachments": [
            {**r.to_json(), "path": str(store.path_of(r))} for r in records]})
        return
    if not records:
        output.note(f"#{card_id} has no attachments")
    output.out_lines(f"{r.name}\t{r.size}\t{r.media_type}\t{r.sha256[:12]}" for r in records)


@attachments.command("rm")
@card_id_argument()
@click.argument("name")
@click.pass_context
def remove(ctx: click.Context, card_id: int, name: str) -> None:
    """Remove an attachment from a card (its bytes go once no card holds them)."""
    _attachments(ctx).remove(card_id, name)
    output.out(f"removed {name} from #{card_id}")
