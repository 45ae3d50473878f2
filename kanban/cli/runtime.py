"""Commands that run things: `dispatch` and `workers`.

The dispatcher is imported inside the command so other commands start fast.
"""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import click

from kanban.cli import exit_codes, output
from kanban.cli.base import (
    board_filter,
    command,
    config_of,
    json_option,
    location_of,
    open_kanban,
)
from kanban.cli.errors import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from kanban.service import Kanban


@command(epilog=exit_codes.help_epilog())
@click.option("--max-workers", "-w", type=click.IntRange(0, 1024), default=0,
              help="Workers at once (0: config.toml, else from cores and memory).")
@click.option("--once", is_flag=True,
              help="One pass: claim what is ready, wait for those workers, exit.")
@click.option("--cold", is_flag=True, help="Start each worker as a fresh interpreter instead "
              "of forking a warm parent (slower; for comparison).")
@click.option("--drain-timeout", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="On a stop signal, seconds to let running workers finish before their "
                   "cards are handed back (no attempt spent; a second signal: at once).")
@click.option("--verbose", "-v", "verbosity", flag_value=2,
              help="Also log wake-ups, ticks and each step of a card.")
@click.option("--quiet", "-q", "verbosity", flag_value=0,
              help="Log only warnings and errors (no line per card).")
@click.option("--log-file", type=click.Path(dir_okay=False, writable=True), metavar="PATH",
              help="Also append the log to this file.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object per line.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve Prometheus metrics on http://HOST:PORT/metrics (0: any free port; "
                   "the address is printed).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="The address --metrics-port listens on. The endpoint has no token: keep "
                   "it on loopback unless a firewall guards it.")
@click.pass_context
def dispatch(ctx: click.Context, max_workers: int, once: bool, cold: bool,
             drain_timeout: float, verbosity: int | None, log_file: str | None,
             log_format: str, metrics_port: int | None, metrics_host: str) -> None:
    """Run a dispatcher in the foreground: claim ready cards and run workers.

    Logs one line per card event on stderr (claimed, worker pid, outcome, duration,
    tokens). With --board it claims only that board's cards. Ctrl-C, SIGTERM or SIGHUP
    stop claiming and let running workers finish; a second signal hands their cards
    back. Exits 130 after Ctrl-C (an interrupt), 0 after SIGTERM or SIGHUP (a stop).
    With --once, the exit code says how the cards of that pass ended (below).
    """
    from kanban.dispatcher.logs import configure
    from kanban.dispatcher.options import DispatchOptions
    from kanban.dispatcher.service import dispatch as run_dispatch
    from kanban.dispatcher.stopping import EXIT_STRANDED

    kb = open_kanban(ctx)
    config_of(ctx)  # a bad config.toml is one error line before anything starts
    configure(level=1 if verbosity is None else verbosity, fmt=log_format, path=log_file)
    options = DispatchOptions(max_workers=max_workers, board=board_filter(ctx), warm=not cold,
                              drain_timeout_s=drain_timeout, metrics_port=metrics_port,
                              metrics_host=metrics_host)
    location = location_of(ctx)
    d = run_dispatch(kb, location, options, once=once, say=output.note,
                     headline=f"dispatching from {kb.db.display} (Ctrl-C to stop)")
    output.note(f"dispatcher {d.id} stopped")
    if d.stranded:  # named in its log: their leases lapse, another dispatcher requeues them
        sys.exit(EXIT_STRANDED)
    if d.stopped_by == signal.SIGINT:
        sys.exit(EXIT_INTERRUPTED)
    if once and d.id is not None:
        _exit_for_cards_run(kb, d.ran)


def _exit_for_cards_run(kb: Kanban, claimed: set[int]) -> None:
    """--once: exit_codes.TABLE over the cards this pass ran (a card it handed to its
    children, now waiting, is not a failure)."""
    from kanban.queries import card_outcomes

    with kb.db.read() as conn:
        ran = [c for c in card_outcomes(conn, claimed)
               if c[0] not in ("waiting", "ready", "review")]
    code = exit_codes.for_cards(ran)
    if code != exit_codes.OK:
        failed = sum(1 for status, _ in ran if status != "done")
        raise exit_codes.Outcome(f"{failed} card(s) this pass ran did not end done", code)


@command()
@json_option
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """List live workers: pid, card, attempt, heartbeat age and runtime.

    With --board, only that board's workers.
    """
    from kanban.queries import live_workers

    kb = open_kanban(ctx)
    now = kb.clock()
    with kb.db.read() as conn:
        rows = live_workers(conn, board=board_filter(ctx))
    if as_json:
        output.print_json({"workers": [w.to_json(now) for w in rows]})
        return
    if not rows:
        output.note("no live workers")
        return
    from kanban.cli.status_text import worker_lines

    output.out_lines(worker_lines(rows, now))
