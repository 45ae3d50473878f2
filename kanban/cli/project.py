"""Setting up and looking around: `init`, `status` and `completion`."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from kanban.cli import output
from kanban.cli.base import (
    DEFAULT_BOARD,
    board_filter,
    command,
    config_of,
    json_option,
    location_of,
    open_kanban,
    state_of,
)
from kanban.state.errors import ConfigError

GITIGNORE = """\
# Written by `kanban init`: the board's database, logs and workspaces stay out of git.
*
"""


@command()
@click.option("--journal", type=click.Choice(["auto", "rollback"]), default="auto",
              show_default=True,
              help="SQLite's journal for a new board: auto keeps the write-ahead log (WAL) "
                   "wherever the filesystem supports it; rollback never uses it.")
@click.pass_context
def init(ctx: click.Context, journal: str) -> None:
    """Create .kanban/kanban.db here (or at --db) with a 'default' board.

    Also writes .kanban/.gitignore so the database, logs and workspaces stay out of git.
    Safe to run again: an existing database is left as it is. On a network filesystem
    (NFS, SMB, 9p, sshfs, WSL1's Windows drives), or where SQLite cannot enable WAL, the
    board keeps the rollback journal and init says what that costs.
    """
    from kanban.service import Kanban
    from kanban.state.db import open_database
    from kanban.state.paths import DB_NAME, PROJECT_DIR, DbLocation, resolve_db

    state = state_of(ctx)
    if state.db_arg or os.environ.get("KANBAN_DB"):
        location = resolve_db(state.db_arg)
    else:
        location = DbLocation(str(Path.cwd() / PROJECT_DIR / DB_NAME), "project")
    existed = not location.is_postgres and location.path.exists()
    db = open_database(location, create=True, journal=journal)
    try:
        Kanban(db).ensure_board(DEFAULT_BOARD)
        where = db.display
        warning = db.journal_warning()
    finally:
        db.dispose()
    if warning:
        output.note(f"warning: {warning}")
    if not location.is_postgres and location.path.parent.name == PROJECT_DIR:
        ignore = location.path.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text(GITIGNORE)
    if location.is_postgres:  # the schema is made or brought up to date; the database exists
        output.out(f"kanban database ready at {where}")
    else:
        output.out(f"kanban database {'already at' if existed else 'created at'} {where}")


@command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show the version, database, config, card counts, dispatchers and workers.

    With --board, counts and workers are those of one board. The config named is the file
    in use ($KANBAN_CONFIG, else config.toml beside the database); when `dispatch` would
    refuse it, the error follows on stderr and the exit status is 1.
    """
    from kanban.cli.reads import status as read_status

    location = location_of(ctx)
    summary = read_status(open_kanban(ctx), board_filter(ctx), location)
    summary = replace(summary, reach=profiles_reach(ctx))
    if as_json:
        output.print_json(summary.to_json())
    else:
        from kanban.cli.status_text import status_lines

        output.out_lines(status_lines(summary))
    if summary.config_error is not None:  # as `dispatch` and `add` would refuse it
        from kanban.errors import ConfigError

        raise ConfigError(summary.config_error)


def profiles_reach(ctx: click.Context) -> dict[str, Any]:
    """What a card of each profile that runs commands can read, write and reach."""
    from kanban.state.sandbox_paths import own_network_likely, reach, runs_commands

    try:
        config = config_of(ctx)
    except ConfigError:  # said by the config check; the counts still show
        return {}
    return {name: reach(p, own_network=own_network_likely,
                        private_networks=config.web.allow_private)
            for name, p in sorted(config.profiles.items()) if runs_commands(p)}


SHELLS = ("bash", "zsh", "fish")


@command()
@click.argument("shell", type=click.Choice(SHELLS), metavar="SHELL")
def completion(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish.

    Completes commands, options, card ids, boards, profiles and cron job names. Install:

    \b
      bash: kanban completion bash > ~/.local/share/bash-completion/completions/kanban
      zsh:  kanban completion zsh > "${fpath[1]}/_kanban"
      fish: kanban completion fish > ~/.config/fish/completions/kanban.fish
    """
    from click.shell_completion import get_completion_class

    from kanban.cli.app import app

    cls = get_completion_class(shell)
    assert cls is not None  # the choice above names only supported shells
    output.out(cls(app, {}, "kanban", "_KANBAN_COMPLETE").source())
