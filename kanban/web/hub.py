"""The live board's fan-out: one read per change, the same bytes to every viewer.

A change source wakes the hub; the hub reads what changed since its cursor (the newest
event it has sent) in one read transaction for all boards, encodes one Server-Sent
Event per board and puts it in each viewer's queue. Viewers cost nothing while idle and
no database work per viewer is ever done on fan-out; a viewer that reconnects with
`Last-Event-ID` gets one catch-up read of its own, at connect time only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kanban.changes import MAX_REPLAY, BoardHeader, Changes, changes_plan
from kanban.queries import event_cursor_plan
from kanban.state.aio import AsyncDatabase
from kanban.web.render import card_json
from kanban.web.watch import ChangeSource

TICK_S = 5.0  # with viewers and no commits, look again (a dispatcher may have died)
KEEPALIVE_S = 20.0  # a comment line now and then keeps proxies and dead peers honest
QUEUE_SIZE = 64  # messages a slow viewer may lag before it is dropped (it reconnects)
RETRY_MS = 1000  # what browsers wait before reconnecting
_CLOSE = b""


@dataclass(eq=False)
class Viewer:
    board: str
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))


@dataclass
class HubStats:
    refreshes: int = 0  # change reads done
    sent: int = 0  # messages queued to viewers
    dropped: int = 0  # viewers dropped for lagging


def sse(kind: str, data: Any, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"{head}event: {kind}\ndata: {body}\n\n".encode()


class Hub:
    def __init__(self, adb: AsyncDatabase, source: ChangeSource,
                 clock: Callable[[], datetime], *, tick_s: float = TICK_S,
                 keepalive_s: float = KEEPALIVE_S) -> None:
        self.adb = adb
        self.source = source
        self.clock = clock
        self.tick_s = tick_s
        self.keepalive_s = keepalive_s
        self.cursor = 0
        self.stats = HubStats()
        self._running: frozenset[int] = frozenset()
        self._headers: dict[str, BoardHeader] = {}
        self._viewers: set[Viewer] = set()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._last_sent = time.monotonic()

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    async def start(self) -> None:
        await self.source.start()
        self.cursor = await self.adb.run(event_cursor_plan())
        self._task = asyncio.create_task(self._loop(), name="kanban-web-hub")

    def close_viewers(self) -> None:
        """End every viewer's stream (the server is shutting down)."""
        for viewer in list(self._viewers):
            self._close(viewer)

    async def stop(self) -> None:
        """End every viewer's stream, then stop watching."""
        self.close_viewers()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.source.close()

    async def _loop(self) -> None:
        while True:
            changed = await self.source.wait(self.tick_s)
            if changed or self._viewers:
                try:
                    await self.refresh()
                except Exception as exc:  # a failed read must not end the live board
                    self._broadcast(sse("problem", {"error": str(exc)}))
            if self._viewers and time.monotonic() - self._last_sent >= self.keepalive_s:
                self._broadcast(b": keepalive\n\n")

    async def refresh(self) -> None:
        """Read what changed since the cursor and send each board's part to its viewers."""
        async with self._lock:
            changes = await self.adb.run(changes_plan(self.cursor, now=self.clock(),
                                                      running=self._running))
            self.stats.refreshes += 1
            if changes.reset:
                self._broadcast(sse("reset", {"cursor": changes.cursor}, changes.cursor))
            else:
                for board in {v.board for v in self._viewers}:
                    message = self._message(board, changes, self._headers.get(board))
                    if message is not None:
                        self._send_to(board, sse("board", message, changes.cursor))
            self.cursor, self._running = changes.cursor, changes.running
            self._headers = changes.headers

    @staticmethod
    def _message(board: str, changes: Changes, last: BoardHeader | None,
                 ) -> dict[str, Any] | None:
        """One board's part of a change, or None when that board saw nothing new."""
        part = changes.for_board(board)
        header = changes.headers.get(board)
        out: dict[str, Any] = {"board": board, "cursor": changes.cursor}
        if part.cards:
            out["cards"] = [card_json(c, part.approvals.get(c.id, [])) for c in part.cards]
        if part.removed:
            out["removed"] = part.removed
        if part.counts is not None:
            out["counts"] = part.counts
        if header is not None and header != last:
            out["header"] = header.to_json()
        if header is None and last is not None:
            out["gone"] = True  # the board itself no longer exists
        return out if len(out) > 2 else None

    async def subscribe(self, board: str, after: int | None) -> Viewer:
        """A new viewer; from `after` (an event id) it is first sent what it missed."""
        viewer = Viewer(board)
        async with self._lock:
            if after is not None and after != self.cursor:
                if after > self.cursor or self.cursor - after > MAX_REPLAY:
                    viewer.queue.put_nowait(sse("reset", {"cursor": self.cursor}, self.cursor))
                else:
                    catch_up = await self.adb.run(changes_plan(after, now=self.clock()))
                    message = self._message(board, catch_up, None)
                    if catch_up.reset:
                        message = None
                        viewer.queue.put_nowait(sse("reset", {"cursor": catch_up.cursor},
                                                    catch_up.cursor))
                    if message is not None:
                        viewer.queue.put_nowait(sse("board", message, catch_up.cursor))
            elif board in self._headers:
                # no events missed, but liveness may have moved since the page was read
                header = {"board": board, "cursor": self.cursor,
                          "header": self._headers[board].to_json()}
                viewer.queue.put_nowait(sse("board", header, self.cursor))
            self._viewers.add(viewer)
        return viewer

    def unsubscribe(self, viewer: Viewer) -> None:
        self._viewers.discard(viewer)

    async def stream(self, viewer: Viewer) -> AsyncIterator[bytes]:
        """The bytes of one viewer's event stream, until it is closed or dropped."""
        try:
            yield f"retry: {RETRY_MS}\n\n".encode()
            while True:
                chunk = await viewer.queue.get()
                if chunk is _CLOSE or not chunk:
                    return
                yield chunk
        finally:
            self.unsubscribe(viewer)

    def _send_to(self, board: str, message: bytes) -> None:
        for viewer in [v for v in self._viewers if v.board == board]:
            self._put(viewer, message)

    def _broadcast(self, message: bytes) -> None:
        for viewer in list(self._viewers):
            self._put(viewer, message)

    def _put(self, viewer: Viewer, message: bytes) -> None:
        try:
            viewer.queue.put_nowait(message)
            self.stats.sent += 1
            self._last_sent = time.monotonic()
        except asyncio.QueueFull:
            self.stats.dropped += 1
            self._close(viewer)  # it reconnects with Last-Event-ID and catches up

    def _close(self, viewer: Viewer) -> None:
        self._viewers.discard(viewer)
        while not viewer.queue.empty():
            viewer.queue.get_nowait()
        viewer.queue.put_nowait(_CLOSE)
