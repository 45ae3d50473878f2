"""A card with a command (a cron script job): run it in the card's workspace through the
command runner, bounded by the card's timeout; no model is called. Its stdout becomes the
card's result; a non-zero exit fails the attempt with the exit code and the output's tail."""

from __future__ import annotations

import math
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kanban import transitions
from kanban.records import CardRecord
from kanban.states import Outcome
from kanban.tools.runner import CommandResult, CommandSpec, PlainRunner, Rlimits, Runner
from kanban.tools.scope import WorkerScope
from kanban.validation import MAX_SUMMARY
from kanban.worker.redact import redact, secrets_in

DEFAULT_TIMEOUT_S = 180.0  # a card with a command and no timeout of its own
EXIT_STOPPED = 128 + signal.SIGTERM  # the dispatcher stopped us; it records why
_TAIL = 2000
_ENV = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")


def run_script(scope: WorkerScope, card: CardRecord, *, home: Path, env: Mapping[str, str],
               runner: Runner | None = None) -> int:
    """The script's steps: run, then complete the card or fail this attempt."""
    assert card.command is not None
    runner = runner or PlainRunner()
    timeout = card.timeout_s or DEFAULT_TIMEOUT_S
    stdout = home / "logs" / f"{card.id}-{card.attempt}.stdout"
    stderr = stdout.with_suffix(".stderr")
    print(f"card #{card.id} attempt {card.attempt}: script, {timeout:g}s at most", flush=True)
    spec = CommandSpec.shell(
        # stderr to its own file, so stdout alone is the result
        f"exec 2>>{shlex.quote(str(stderr))}\n{card.command}",
        cwd=Path.cwd(), env=script_env(env, card), timeout_s=own_deadline(timeout),
        output_path=stdout, rlimits=Rlimits(cpu_s=math.ceil(timeout) + 5),
        stdin=card.context.encode() if card.context else None)
    with _cancel_on_sigterm(runner):
        result = runner.run(spec)
    print(f"script ended: exit {result.exit_code}, {result.duration_s:.1f}s", flush=True)
    return settle(scope, result, stderr, secrets_in(env))


def own_deadline(timeout: float) -> float:
    """A little under the card's timeout, so this worker records the timeout itself before
    the dispatcher stops it."""
    return max(timeout * 0.5, timeout - 5.0)


def script_env(env: Mapping[str, str], card: CardRecord) -> dict[str, str]:
    """Locale, PATH and HOME, and which card this is: no credentials, no claim token."""
    out = {key: env[key] for key in _ENV if key in env}
    out.update({key: value for key, value in env.items() if key.startswith("LC_")})
    out.update({"KANBAN_BOARD": card.board, "KANBAN_CARD": str(card.id),
                "KANBAN_ATTEMPT": str(card.attempt)})
    return out


@contextmanager
def _cancel_on_sigterm(runner: Runner) -> Iterator[None]:
    """SIGTERM (cancel, timeout, shutdown) kills the script's process group too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: object) -> None:
        threading.Thread(target=runner.cancel_all, name="cancel-script", daemon=True).start()

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def settle(scope: WorkerScope, result: CommandResult, stderr: Path,
           secrets: list[str]) -> int:
    """Record how the script ended."""
    if result.cancelled:
        return EXIT_STOPPED
    if result.error is not None or result.timed_out or result.exit_code != 0:
        if result.error is not None:
            why, outcome = f"script did not start: {result.error}", Outcome.FAILED
        elif result.timed_out:
            why, outcome = "script timed out", Outcome.TIMED_OUT
        else:
            why, outcome = f"script exited with code {result.exit_code}", Outcome.FAILED
        tail = redact(_tail(stderr) or _tail(result.output_path), secrets)
        error = f"{why}: {tail}" if tail else why
        print(f"card #{scope.card_id}: {why}", file=sys.stderr, flush=True)
        with scope.fenced() as conn:
            transitions.requeue_or_fail(conn, scope.card_id, outcome, error,
                                        now=scope.kb.clock(), actor=scope.actor)
        return 0
    text, _ = result.read_head_tail(MAX_SUMMARY - 500)
    summary = redact(text, secrets).rstrip() or "(the script printed nothing)"
    with scope.fenced(proven=True) as conn:
        transitions.complete(conn, scope.card_id, summary, now=scope.kb.clock(),
                             actor=scope.actor)
    return 0


def _tail(path: Path) -> str:
    """The last lines of an output file, as one string."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - _TAIL))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
