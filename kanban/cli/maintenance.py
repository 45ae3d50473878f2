"""Keeping the database sound: `kanban check` and `kanban backup`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kanban.cli import output
from kanban.cli.base import command, json_option, location_of, open_kanban


@command()
@click.option("--repair", is_flag=True, help="Apply the safe fixes to what is found.")
@json_option
@click.pass_context
def check(ctx: click.Context, repair: bool, as_json: bool) -> None:
    """Verify the database file and the board's invariants (exit 1 if anything is wrong).

    Checks SQLite's integrity, then that no card runs without a live run and lease, no
    ready card waits on an unfinished dependency, no todo card is held back for nothing
    and no run is left open; --repair fixes those (a damaged file is never written).
    """
    from kanban.check import CheckReport, integrity
    from kanban.check import check as run_check
    from kanban.state.errors import DatabaseError

    location = location_of(ctx)
    try:
        report = run_check(open_kanban(ctx).db, fix=repair)
    except DatabaseError:
        if location.is_postgres or not location.path.is_file():
            raise
        report = CheckReport(integrity(location.path))  # too damaged to open as kanban's
        if report.intact:
            raise
    if as_json:
        output.print_json(report.to_json())
    else:
        output.out_lines(_lines(report))
    if not report.ok:
        sys.exit(1)


def _lines(report: object) -> list[str]:
    from kanban.check import CheckReport

    assert isinstance(report, CheckReport)
    if not report.intact:
        return ["integrity: DAMAGED", *(f"  {line}" for line in report.integrity),
                "stop every kanban process using this database and restore it from a backup "
                "(see README: Backups)"]
    lines = ["integrity: ok"]
    lines += [f"repaired: {f.detail}" for f in report.repaired]
    lines += [f"found: {f.detail}" for f in report.findings]
    if report.findings:
        lines.append("run `kanban check --repair` to fix these")
    elif not report.repaired:
        lines.append("invariants: ok")
    return lines


@command()
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def backup(ctx: click.Context, path: Path) -> None:
    """Write a consistent copy of the database to PATH, safely while dispatchers work.

    Restore: stop every dispatcher and `kanban web`, then copy PATH over the database
    file (removing its -wal and -shm files). PostgreSQL databases are backed up with
    pg_dump instead.
    """
    from kanban.backup import backup as take_backup

    made = take_backup(open_kanban(ctx).db, path)
    output.out(f"backup written to {made.path} ({made.cards:,} cards, "
               f"{made.size / 1_000_000:.1f} MB); verified with integrity_check")
