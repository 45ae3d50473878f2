"""`kanban mcp`: the board as an MCP server. The SDK loads only for this command."""

from __future__ import annotations

import sys

import click

from kanban.cli import output
from kanban.cli.base import board_of, command, location_of, open_kanban


@command()
@click.option("--http", "over_http", is_flag=True,
              help="Serve streamable HTTP at /mcp instead of stdio, guarded by the web "
                   "board's token.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="With --http: the address to listen on (anything but loopback needs a "
                   "token of 16 characters or more).")
@click.option("--port", type=click.IntRange(0, 65535), default=8766, show_default=True,
              help="With --http: the port (0: any free one).")
@click.option("--token", envvar="KANBAN_WEB_TOKEN", show_envvar=True,
              help="With --http: the bearer token clients send (default: a new random one "
                   "each start, printed).")
@click.pass_context
def mcp(ctx: click.Context, over_http: bool, host: str, port: int, token: str | None) -> None:
    """Serve the board to MCP clients (Claude, Cursor): stdio, or HTTP with a token.

    Tools add, list, search and show cards, read the board, comment, answer command
    approvals and reviews, and start a lead; every card id must be of --board. Over stdio
    nothing but the protocol is written to stdout. With --http, stdout gets the address
    and the `Authorization` header a client must send; without it a request is refused
    (401).
    """
    from kanban.errors import BoardNotFound
    from kanban.mcp_server.board import McpBoard

    kb = open_kanban(ctx)
    board = board_of(ctx)
    if board not in {b["name"] for b in kb.boards()}:
        raise BoardNotFound(board)
    served = McpBoard(kb, board, location_of(ctx).home)
    if not over_http:
        given = [f"--{name}" for name in ("host", "port", "token")
                 if ctx.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"{', '.join(given)}: only with --http", ctx)
        from kanban.mcp_server.server import build_server

        build_server(served).run("stdio")
        return
    from kanban.mcp_server.http import HttpOptions, serve_http

    def show(line: str) -> None:
        output.out(line)
        sys.stdout.flush()

    serve_http(served, HttpOptions(host=host, port=port, token=token),
               say=lambda line: output.note(f"kanban mcp: {line}"), show=show)
