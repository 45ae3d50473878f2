"""`kanban web`: the board in a browser. Starlette and uvicorn load only for this command."""

from __future__ import annotations

import sys

import click

from kanban.cli import output
from kanban.cli.base import board_of, command, location_of, open_kanban


@command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on. Anything but loopback needs a token; prefer "
                   "an SSH tunnel.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="The port (0: any free one).")
@click.option("--open", "open_browser", is_flag=True,
              help="Open the board in the default browser.")
@click.option("--token", envvar="KANBAN_WEB_TOKEN", show_envvar=True,
              help="The access token (default: a new random one each start). An empty token "
                   "turns authentication off and is allowed on loopback only.")
@click.option("--per-column", type=click.IntRange(1, 500), default=20, show_default=True,
              help="Cards shown per column before 'more'.")
@click.pass_context
def web(ctx: click.Context, host: str, port: int, open_browser: bool, token: str | None,
        per_column: int) -> None:
    """Serve a live board in the browser, on this machine, guarded by a token.

    The address printed on stdout carries the token; the first visit trades it for a
    session cookie. --board picks the board shown first. Ctrl-C stops the server.
    """
    from kanban.web.server import ServeOptions, serve

    kb = open_kanban(ctx)
    options = ServeOptions(host=host, port=port, board=board_of(ctx), token=token,
                           open_browser=open_browser, per_column=per_column)

    def show_url(url: str) -> None:
        output.out(url)
        sys.stdout.flush()

    serve(kb, location_of(ctx), options, say=lambda line: output.note(f"kanban web: {line}"),
          show_url=show_url)
