"""Sending one message to one target: a file, a webhook, a command (a card's comment is
written by the courier, inside its transaction). Cron results and notifications both go out
through here.

Each sender returns None when the target took the message, or the one-line reason it did not.
None of them holds a database transaction while it waits on the outside world.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kanban.delivery.targets import Target, TargetKind
from kanban.state.config import Delivery
from kanban.tools.runner import CommandSpec, PlainRunner, Rlimits

SIGNATURE_HEADER = "X-Kanban-Signature-256"
DELIVERY_HEADER = "X-Kanban-Delivery"
ATTEMPT_HEADER = "X-Kanban-Attempt"
_ERROR_CAP = 300
_PASS_THROUGH = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "TMPDIR")


@dataclass(frozen=True)
class Message:
    """What is delivered, the same on every attempt (its `delivery_id` included)."""

    delivery_id: str  # stable: a receiver drops a repeat by it
    source: str  # cron or notify: the User-Agent says which
    author: str  # who a `board:` comment is from
    board: str
    card_id: int
    heading: str  # one line: a file entry's and a comment's first line
    text: str  # a file entry's and a comment's body
    payload: Mapping[str, Any]  # the JSON a webhook receives
    stdin: bytes  # what a `cmd:` target reads
    env: Mapping[str, str] = field(default_factory=dict)  # and its variables

    def body(self) -> bytes:
        """The JSON a webhook receives (signed byte for byte)."""
        return json.dumps(self.payload, ensure_ascii=False, sort_keys=True).encode()


@dataclass(frozen=True)
class Context:
    """What senders need from the process that runs them."""

    settings: Delivery
    secret: str | None
    home: Path  # a `cmd:` target's working folder; its output goes to home/logs
    env: Mapping[str, str]


def send(target: Target, message: Message, attempt: int, ctx: Context) -> str | None:
    if target.kind is TargetKind.FILE:
        return to_file(Path(target.value), message)
    if target.kind is TargetKind.WEBHOOK:
        return to_webhook(target.value, message, attempt, ctx)
    if target.kind is TargetKind.CMD:
        return to_command(target.value, message, attempt, ctx)
    raise ValueError(f"{target} is delivered inside a transaction (see delivery.courier)")


def to_file(path: Path, message: Message) -> str | None:
    """Append a dated entry in one write (a file opened for appending)."""
    entry = f"## {message.heading}\n{message.text.rstrip()}\n\n".encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, entry)
        finally:
            os.close(fd)
    except OSError as exc:
        return f"cannot append to {path}: {exc.strerror}"
    return None


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: `sha256=` and the hex HMAC of the exact body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer other than 2xx: the attempt failed


_OPENER = urllib.request.build_opener(_NoRedirects)


def to_webhook(url: str, message: Message, attempt: int, ctx: Context) -> str | None:
    if not ctx.secret:
        return "no webhook secret configured ([delivery] webhook_secret or "\
               "$KANBAN_WEBHOOK_SECRET)"
    body = message.body()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": f"kanban-{message.source}",
        SIGNATURE_HEADER: signature(ctx.secret, body),
        DELIVERY_HEADER: message.delivery_id, ATTEMPT_HEADER: str(attempt)})
    try:
        with _OPENER.open(request, timeout=ctx.settings.webhook_timeout_s) as response:
            response.read(64 * 1024)
            return None
    except urllib.error.HTTPError as exc:
        detail = exc.read(_ERROR_CAP).decode("utf-8", "replace").strip()
        return f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else "")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {url}: {reason}"[:_ERROR_CAP]


def to_command(command: str, message: Message, attempt: int, ctx: Context) -> str | None:
    """Run the command as typed by the person who chose it, the message on stdin and in
    its environment (never in the command line); exit 0 means delivered."""
    env = {key: ctx.env[key] for key in _PASS_THROUGH if key in ctx.env}
    env.update({**message.env, "KANBAN_CARD": str(message.card_id),
                "KANBAN_BOARD": message.board, "KANBAN_DELIVERY": message.delivery_id})
    output = ctx.home / "logs" / f"delivery-{message.delivery_id}-{attempt}.log"
    timeout = ctx.settings.command_timeout_s
    ran = PlainRunner().run(CommandSpec.shell(
        command, cwd=ctx.home, env=env, timeout_s=timeout, output_path=output,
        rlimits=Rlimits(cpu_s=int(timeout) + 1), stdin=message.stdin))
    if ran.error:
        return ran.error
    if ran.timed_out:
        return f"timed out after {timeout:g}s (output in {output})"
    if ran.exit_code != 0:
        tail, _ = ran.read_head_tail(_ERROR_CAP)
        return f"exited with code {ran.exit_code}: {' '.join(tail.split())[-_ERROR_CAP:]}"
    return None
