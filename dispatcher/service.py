"""Running a dispatcher in the foreground, as `kanban dispatch` does."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from kanban.dispatcher.environment import seal_dispatcher
from kanban.dispatcher.loop import Dispatcher
from kanban.dispatcher.options import DispatchOptions
from kanban.service import Kanban
from kanban.state.config import SCRIPTED_DEMO
from kanban.state.config_file import resolve_config
from kanban.state.paths import DbLocation
from kanban.tools.sandbox import check_sandbox


def build_dispatcher(kb: Kanban, location: DbLocation,
                     options: DispatchOptions = DispatchOptions()) -> Dispatcher:
    config = resolve_config(location.home)
    if options.board is not None:
        from kanban.cards import require_board

        with kb.db.read() as conn:
            require_board(conn, options.board)
    return Dispatcher(kb, config, home=location.home, db_target=location.target,
                      options=options)


def unsandboxed_note() -> str | None:
    """The warning a dispatcher starts with on a host where bwrap cannot sandbox commands."""
    sandbox = check_sandbox()  # cached: the dispatcher's registration asks the same
    if sandbox.available:
        return None
    return (f"commands are UNSANDBOXED: {sandbox.reason}. Unknown and dangerous commands "
            "wait for a person's approval, even under approval = \"allow\" (unless the "
            "profile also says sandbox = \"off\")")


def startup_notes(dispatcher: Dispatcher) -> list[str]:
    """What a person should know as the dispatcher starts (beside `unsandboxed_note`)."""
    default = dispatcher.config.profile("default")
    notes: list[str] = []  # the worker limit and board are in the "started" log line
    if default.model is None and default.resolved_model(dispatcher.env) == SCRIPTED_DEMO:
        notes.append("no API key configured: the default profile uses the offline scripted "
                     "demo model (set OPENAI_API_KEY or ANTHROPIC_API_KEY, or a model in "
                     "config.toml)")
    return notes


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def stop_on_signals(dispatcher: Dispatcher) -> Iterator[None]:
    """SIGINT, SIGTERM or SIGHUP: first stop claiming and drain; a second one hands cards
    back. The dispatcher remembers the signal (`kanban dispatch` exits 130 after SIGINT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        dispatcher.request_stop(signum)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def dispatch(kb: Kanban, location: DbLocation, options: DispatchOptions, *,
             once: bool = False, say: Callable[[str], None] = print,
             headline: str | None = None) -> Dispatcher:
    """Run a dispatcher in this process; its first line says so when commands run
    unsandboxed, then `headline`, then the other start-up notes."""
    dispatcher = build_dispatcher(kb, location, options)
    seal_dispatcher()
    warning = unsandboxed_note()
    for note in [*([warning] if warning else []), *([headline] if headline else []),
                 *startup_notes(dispatcher)]:
        say(note)
    dispatcher.exit_when_stuck = True  # this process is the dispatcher (stopping.py)
    with stop_on_signals(dispatcher), serving_metrics(dispatcher, say):
        dispatcher.run(once=once)
    return dispatcher


@contextmanager
def serving_metrics(dispatcher: Dispatcher, say: Callable[[str], None]) -> Iterator[None]:
    """--metrics-port: the dispatcher's /metrics while it runs (nothing without it)."""
    opts = dispatcher.opts
    if opts.metrics_port is None:
        yield
        return
    from kanban.dispatcher.metrics import is_loopback, serve_metrics

    served = serve_metrics(dispatcher, opts.metrics_port, opts.metrics_host)
    say(f"metrics on {served.url}" + ("" if is_loopback(opts.metrics_host) else
                                     " (no authentication: anyone who reaches it can read "
                                     "the board's counts, profiles and models)"))
    try:
        yield
    finally:
        served.close()
