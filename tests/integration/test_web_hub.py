"""The live board's hub: one read per change for any number of viewers, on every store."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.state.aio import open_async
from kanban.state.store import Database
from kanban.web import hub as hub_module
from kanban.web.hub import Hub, Viewer
from kanban.web.watch import PolledChanges, change_source
from tests.support.db import STORES

both_stores = pytest.mark.parametrize("store", STORES, indirect=True)
WAIT_S = 30.0  # a bound for waiting on a state, not a timing goal


def parse(chunk: bytes) -> tuple[str, dict[str, Any]]:
    lines = chunk.decode().strip().splitlines()
    kind = next(line[7:] for line in lines if line.startswith("event: "))
    return kind, json.loads(next(line[6:] for line in lines if line.startswith("data: ")))


async def next_board_message(viewer: Viewer, want: Callable[[dict[str, Any]], bool]
                             ) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        while True:
            kind, data = parse(await viewer.queue.get())
            if kind == "board" and want(data):
                return data

    return await asyncio.wait_for(read(), WAIT_S)


def with_hub(db: Database, body: Callable[[Hub], Awaitable[None]]) -> None:
    async def scenario() -> None:
        adb = open_async(db)
        source = change_source(adb)
        if isinstance(source, PolledChanges):
            source.poll_s = 0.05
        hub = Hub(adb, source, Kanban(db).clock, tick_s=0.5)
        await hub.start()
        try:
            await body(hub)
        finally:
            await hub.stop()
            await adb.close()

    asyncio.run(scenario())


@both_stores
def test_one_read_per_change_whatever_the_number_of_viewers(kb: Kanban, db: Database) -> None:
    kb.create_board("other")

    async def body(hub: Hub) -> None:
        await pause_loop(hub)  # each change is read by the one refresh made here
        await hub.refresh()  # the boards' headers, which joining viewers are sent
        cost = {}
        for n in (1, 40):
            viewers = [await hub.subscribe("default", None) for _ in range(n)]
            elsewhere = await hub.subscribe("other", None)
            for v in (*viewers, elsewhere):  # the header each gets on joining
                await next_board_message(v, lambda m: "header" in m)
            card = await asyncio.to_thread(kb.add_card, NewCard(f"for {n} viewers"))
            before = hub.adb.queries
            await hub.refresh()
            cost[n] = hub.adb.queries - before
            got = await asyncio.gather(*(next_board_message(v, lambda m, c=card: any(
                x["id"] == c.id for x in m.get("cards", []))) for v in viewers))
            assert all(m == got[0] for m in got)  # the very same message for everyone
            assert elsewhere.queue.empty()  # another board's viewers get nothing
            for v in (*viewers, elsewhere):
                hub.unsubscribe(v)
        assert cost[1] == cost[40], cost

    with_hub(db, body)


async def pause_loop(hub: Hub) -> None:
    """Stop the hub's own refreshes (ticks and wake-ups), so a test can count one."""
    assert hub._task is not None
    hub._task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await hub._task
    hub._task = None


async def wait_quiet(hub: Hub) -> None:
    """Let a refresh already under way finish, so that counting starts clean."""
    async with hub._lock:
        pass


@both_stores
def test_a_lagging_viewer_is_dropped_and_catches_up(kb: Kanban, db: Database,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub_module, "QUEUE_SIZE", 2)

    async def body(hub: Hub) -> None:
        slow = await hub.subscribe("default", None)
        cursor = hub.cursor
        for i in range(4):  # nobody reads `slow`: its queue of two fills up
            sent = hub.stats.sent + hub.stats.dropped
            await asyncio.to_thread(kb.add_card, NewCard(f"burst {i}"))
            await wait_for(lambda s=sent: hub.stats.sent + hub.stats.dropped > s)
            if hub.stats.dropped:
                break
        assert hub.stats.dropped == 1 and hub.viewers == 0
        chunks = [chunk async for chunk in hub.stream(slow)]
        assert chunks[0].startswith(b"retry:")  # the stream ends: the browser reconnects
        again = await hub.subscribe("default", cursor)  # with its Last-Event-ID
        caught = await next_board_message(again, lambda m: "cards" in m)
        assert {c["title"] for c in caught["cards"]} >= {"burst 0", "burst 1"}

    with_hub(db, body)


async def wait_for(predicate: Callable[[], bool]) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), WAIT_S)


@pytest.mark.parametrize("store", [STORES[1]], indirect=True)  # LISTEN/NOTIFY: PostgreSQL's
def test_postgres_wakes_on_a_notification_before_its_poll(kb: Kanban, db: Database) -> None:
    """A new ready card is announced by LISTEN/NOTIFY: the source wakes long before a poll
    that is set to come only after the test's bound."""

    async def scenario() -> bool:
        adb = open_async(db)
        source = change_source(adb)
        assert isinstance(source, PolledChanges) and source.notify_url is not None
        source.poll_s = 10 * WAIT_S  # no poll within the wait below
        await source.start()
        try:
            listener = source._listener
            await asyncio.to_thread(listener.listening.wait, WAIT_S)
            waiting = asyncio.create_task(source.wait(10 * WAIT_S))
            await asyncio.to_thread(kb.add_card, NewCard("announced"))
            return await asyncio.wait_for(waiting, WAIT_S)
        finally:
            await source.close()
            await adb.close()

    assert asyncio.run(scenario()) is True
