"""The Rich board view: readable at 80 columns, every marker present; the watch loop."""

from __future__ import annotations

import io
from datetime import timedelta

from rich.cells import cell_len
from rich.console import Console

from kanban import control, transitions
from kanban.cards import NewCard
from kanban.cli.views import render_board
from kanban.cli.watch import watch
from kanban.service import Kanban
from kanban.state.db import open_database
from kanban.state.paths import DbLocation
from kanban.when import age

LONG = "Refactor the ingestion pipeline so that every stage reports progress " \
       "and retries transient failures with jittered backoff"


def render(kanban: Kanban, width: int = 80, per_column: int = 10) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, legacy_windows=False)
    console.print(render_board(kanban.board_snapshot("default", per_column=per_column)))
    return out.getvalue().splitlines()


def busy_board(kanban: Kanban) -> None:
    """One card in every state, long titles, a cron card, a live dispatcher."""
    add = kanban.add_card
    first = add(NewCard(LONG, priority=9))
    add(NewCard("waits on the first " + LONG, depends_on=[first.id]))
    add(NewCard("nightly report", created_by="cron:nightly-report"))
    running = add(NewCard("Runs now " + LONG, priority=100))
    [claim] = kanban.claim(1, lease_s=30)
    assert claim.card_id == running.id
    kanban.heartbeat(claim.card_id, claim.claim_token, run_id=claim.run_id, lease_s=30,
                     note="step 3 of 7: " + LONG)
    kanban.block(add(NewCard("Needs a human " + LONG)).id, "which API key?")
    kanban.complete(add(NewCard("Finished " + LONG)).id, "done")
    kanban.cancel(add(NewCard("Cancelled " + LONG)).id, reason="obsolete")
    doomed = add(NewCard("Doomed " + LONG, priority=1_000_000))
    [claim] = kanban.claim(1, lease_s=30)
    assert claim.card_id == doomed.id
    with kanban.db.write() as conn:
        transitions.fail(conn, doomed.id, "401 unauthorized", now=kanban.clock(),
                         actor=transitions.Actor("dispatcher"))
        control.register_dispatcher(conn, host="box", pid=4242, now=kanban.clock())


def test_board_fits_80_columns_and_shows_everything(kanban: Kanban) -> None:
    busy_board(kanban)
    lines = render(kanban)
    assert all(cell_len(line) <= 80 for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    assert lines[0] == "board default · 8 cards · dispatcher: alive (pid 4242)"
    for header in ("todo 1", "ready 2", "running 1", "blocked 1", "done 1", "failed 1",
                   "cancelled 1"):
        assert header in text, header
    assert "#4 p100" in text  # priority shown when non-zero
    assert "#2 0s" in text  # and omitted when zero
    assert "⏰ night" in text
    assert "⏰ nightly-report" in "\n".join(render(kanban, width=160))
    assert "♥ 0s step 3 of" in text
    assert "— which API key?" in "\n".join(render(kanban, width=160))  # why it is blocked
    assert "waits on the" in text and "first Refactor…" in text  # titles get two lines


def test_board_header_pause_states(kanban: Kanban) -> None:
    kanban.add_card(NewCard("a"))
    assert render(kanban)[0] == "board default · 1 card · no dispatcher"
    kanban.set_paused(True, board="default")
    assert "spawning paused (board)" in render(kanban)[0]
    kanban.set_paused(True)
    assert "spawning paused (global and board)" in render(kanban)[0]
    kanban.set_paused(False, board="default")
    assert "spawning paused (global)" in render(kanban)[0]


def test_extra_row_only_when_failed_or_cancelled(kanban: Kanban) -> None:
    kanban.add_card(NewCard("a"))
    text = "\n".join(render(kanban))
    assert "failed" not in text and "cancelled" not in text
    kanban.cancel(1)
    text = "\n".join(render(kanban))
    assert "cancelled 1" in text and "failed" not in text


def test_waiting_cards_get_their_column(kanban: Kanban) -> None:
    from tests.support.db import put_card_in

    assert "waiting" not in "\n".join(render(kanban))
    put_card_in(kanban, "waiting")
    text = "\n".join(render(kanban))
    assert "waiting 1" in text and "#1" in text


def test_more_marker_when_a_column_overflows(kanban: Kanban) -> None:
    for i in range(25):
        kanban.add_card(NewCard(f"card {i}"))
    text = "\n".join(render(kanban, per_column=10))
    assert "ready 25" in text
    assert "+15 more" in text


def test_narrow_and_wide_terminals(kanban: Kanban) -> None:
    busy_board(kanban)
    for width in (60, 120, 200):
        assert all(cell_len(line) <= width for line in render(kanban, width=width))


def test_compact_age() -> None:
    from datetime import UTC, datetime

    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert [age(now - timedelta(seconds=s), now) for s in (-5, 0, 59, 60, 3599, 3600, 86_399,
                                                             86_400, 10 * 86_400)] \
        == ["0s", "0s", "59s", "1m", "59m", "1h", "23h", "1d", "10d"]
    assert age(None, now) == "-"


def test_watch_redraws_when_another_connection_writes(kanban: Kanban) -> None:
    assert kanban.db.path is not None
    other_db = open_database(DbLocation(str(kanban.db.path), "flag"))
    other = Kanban(other_db)
    renders: list[int] = []
    polls = iter(range(100))

    def draw() -> object:
        snapshot = kanban.board_snapshot("default")
        renders.append(snapshot.counts["ready"])
        return render_board(snapshot)

    def stop() -> bool:
        poll = next(polls)
        if poll == 2:
            other.add_card(NewCard("written elsewhere"))
        return poll >= 5 or len(renders) >= 3

    console = Console(file=io.StringIO(), width=80, color_system=None)
    try:
        frames = watch(kanban.db, draw, console=console, interval=0, stop=stop,
                       sleep=lambda _s: None, clock=lambda: 0.0)
    finally:
        other_db.dispose()
    assert frames == 2  # the first draw, then one redraw for the one change
    assert renders == [0, 1]


def test_watch_refreshes_ages_without_changes(kanban: Kanban) -> None:
    ticks = iter([0.0, 1.0, 6.0, 7.0, 13.0, 13.5])
    polls = iter(range(4))
    frames = watch(kanban.db, lambda: "board", console=Console(file=io.StringIO()),
                   interval=0, stop=lambda: next(polls) >= 3, sleep=lambda _s: None,
                   clock=lambda: next(ticks))
    assert frames == 3
