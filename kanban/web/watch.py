"""Noticing commits: one change source per server, whatever the number of viewers.

SQLite uses the dispatcher's own wake-up (PRAGMA data_version, woken by inotify on the
database's folder) on a thread of its own. PostgreSQL wakes on the dispatcher's LISTEN/NOTIFY
channel (state changes that matter to claims: ready, cancelled, finished children, pauses)
and reads a cheap fingerprint query every `POLL_S` for everything the triggers do not
announce (comments, heartbeats, activity), behind the same `ChangeSource` protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any, Protocol

from kanban.changes import fingerprint_plan
from kanban.state.aio import AsyncDatabase

POLL_S = 0.25  # PostgreSQL: how often the fingerprint is read
WATCH_SLICE_S = 1.0  # SQLite: the watcher thread's longest sleep before it looks at `stop`


class ChangeSource(Protocol):
    async def start(self) -> None: ...

    async def wait(self, timeout: float) -> bool:
        """Return True once the database may have changed, False after `timeout`."""
        ...

    async def close(self) -> None: ...


class SQLiteChanges:
    """data_version + inotify, as the dispatcher's wake-ups, on a daemon thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._changed = asyncio.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: Any = None

    async def start(self) -> None:
        from kanban.dispatcher.wake import ChangeWatcher

        loop = asyncio.get_running_loop()
        self._watcher = ChangeWatcher(self.path)
        watcher, stop, changed = self._watcher, self._stop, self._changed

        def watch() -> None:
            while not stop.is_set():
                if watcher.wait(WATCH_SLICE_S, stop):
                    with contextlib.suppress(RuntimeError):  # the loop closed under us
                        loop.call_soon_threadsafe(changed.set)

        self._thread = threading.Thread(target=watch, name="kanban-web-watch", daemon=True)
        self._thread.start()

    async def wait(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)
        fired = self._changed.is_set()
        self._changed.clear()
        return fired

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, WATCH_SLICE_S * 2)
        if self._watcher is not None:
            self._watcher.close()


class PolledChanges:
    """A fingerprint (newest event, newest heartbeats) read every `poll_s` seconds; with
    `notify_url`, a LISTEN connection on a thread also wakes it at once on a notification."""

    def __init__(self, adb: AsyncDatabase, poll_s: float = POLL_S,
                 notify_url: str | None = None) -> None:
        self.adb = adb
        self.poll_s = poll_s
        self.notify_url = notify_url
        self._last: tuple[Any, ...] | None = None
        self._notified = asyncio.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: Any = None

    async def start(self) -> None:
        self._last = await self.adb.run(fingerprint_plan())
        if self.notify_url is not None:
            self._start_listening(self.notify_url)

    def _start_listening(self, url: str) -> None:
        from kanban.dispatcher.wake import NotifyWatcher
        from kanban.state.postgres import PostgresDatabase

        loop = asyncio.get_running_loop()
        self._listener = NotifyWatcher(PostgresDatabase(url))
        listener, stop, notified = self._listener, self._stop, self._notified

        def listen() -> None:
            while not stop.is_set():
                if listener.wait(WATCH_SLICE_S, stop):
                    with contextlib.suppress(RuntimeError):  # the loop closed under us
                        loop.call_soon_threadsafe(notified.set)

        self._thread = threading.Thread(target=listen, name="kanban-web-listen", daemon=True)
        self._thread.start()

    async def wait(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            pause = max(0.0, min(self.poll_s, deadline - loop.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._notified.wait(), pause)
            notified = self._notified.is_set()
            self._notified.clear()
            now = await self.adb.run(fingerprint_plan())
            if notified or now != self._last:
                self._last = now
                return True
            if loop.time() >= deadline:
                return False

    async def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, WATCH_SLICE_S * 2)
        if self._listener is not None:
            await asyncio.to_thread(self._listener.close)


def change_source(adb: AsyncDatabase) -> ChangeSource:
    path = getattr(adb, "path", None)
    if adb.dialect == "sqlite" and path is not None:
        return SQLiteChanges(path)
    return PolledChanges(adb, notify_url=getattr(adb, "url", None))
