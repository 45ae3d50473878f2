"""`kanban web` as a real subprocess, an httpx client signed in to it, and an SSE reader."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.procs import KANBAN

TOKEN = "test-token-0123456789abcdef"
START_TIMEOUT_S = 60.0
CSRF = re.compile(r'data-csrf="([0-9a-f]+)"')


@dataclass
class WebServer:
    proc: subprocess.Popen[str]
    url: str  # with ?token=
    token: str
    db: Path | str  # a file, or a PostgreSQL URL
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0].rstrip("/")

    def client(self, *, signed_in: bool = True, **kwargs: Any) -> httpx.Client:
        """A client; signed in = it opened the token URL and holds the session cookie."""
        client = httpx.Client(base_url=self.base, timeout=30, **kwargs)
        self.clients.append(client)
        if signed_in:
            response = client.get(self.url, follow_redirects=True)
            assert response.status_code == 200, response.text
        return client

    def csrf(self, client: httpx.Client) -> str:
        match = CSRF.search(client.get("/").text)
        assert match, "the board page carries no CSRF token"
        return match.group(1)

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30) -> int:
        for client in self.clients:
            client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()


def start_web(db: Path | str, *args: str, token: str | None = TOKEN,
              env: Mapping[str, str] | None = None) -> WebServer:
    """`kanban --db DB web --port 0 ...`; returns once it has printed its address.
    A PostgreSQL URL comes through KANBAN_DB in `env` instead (`--db` takes paths)."""
    where = [] if str(db).startswith("postgresql:") else ["--db", str(db)]
    command = [*KANBAN, *where, "web", "--port", "0", *args]
    if token is not None:
        command += ["--token", token]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(env or os.environ))
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(START_TIMEOUT_S):
            proc.kill()
            raise AssertionError("kanban web printed no address")
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.wait(30)
        raise AssertionError(f"kanban web failed: {url!r} {proc.stderr.read()}")  # type: ignore[union-attr]
    return WebServer(proc, url, token or "", db)


@dataclass(frozen=True)
class Sse:
    id: str | None
    event: str
    data: Any


def sse_events(response: httpx.Response) -> Iterator[Sse]:
    """Parse a text/event-stream response into events (comments and `retry` skipped)."""
    event_id: str | None = None
    kind, data = "message", list[str]()
    for line in response.iter_lines():
        if not line:
            if data:
                yield Sse(event_id, kind, json.loads("\n".join(data)))
            event_id, kind, data = None, "message", []
        elif line.startswith(":") or line.startswith("retry:"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def next_event(events: Iterator[Sse], want: Any, *, timeout: float = 30) -> Sse:
    """The first event for which `want(event)` holds (others are skipped)."""
    deadline = time.monotonic() + timeout
    for event in events:
        if want(event):
            return event
        if time.monotonic() > deadline:
            break
    raise AssertionError("the stream ended or timed out before the awaited event")
