"""`--at TIME` and `--in DURATION`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.errors import ValidationError
from kanban.when import due_at, due_in, parse_duration

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400),
    ("2 hours", 7200), ("1.5h", 5400), ("1w", 604800), (" 10 min ", 600),
])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)
    assert due_in(text, NOW) == NOW + timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "2", "h", "2 fortnights", "-5m", "0s", "3650000d"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValidationError):
        parse_duration(text)


def test_times_with_an_offset_or_z() -> None:
    assert due_at("2025-03-01T15:00:00+02:00", NOW) == datetime(2025, 3, 1, 13, tzinfo=UTC)
    assert due_at("2025-03-02T00:00Z", NOW) == datetime(2025, 3, 2, tzinfo=UTC)


def test_local_times(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "Europe/Paris")
    time.tzset()
    try:
        assert due_at("2025-03-01 18:00", NOW) == datetime(2025, 3, 1, 17, tzinfo=UTC)
        # a clock time: its next occurrence (13:00 Paris is 12:00 UTC: now, so tomorrow)
        assert due_at("13:00", NOW) == datetime(2025, 3, 2, 12, tzinfo=UTC)
        assert due_at("13:30", NOW) == datetime(2025, 3, 1, 12, 30, tzinfo=UTC)
        # summer time starts on 30 March: the wall clock keeps its meaning
        assert due_at("2025-04-01T09:00", NOW) == datetime(2025, 4, 1, 7, tzinfo=UTC)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("text", ["yesterday", "2025-02-28T12:00Z", "25:00", "2040-13-01",
                                  "2099-01-01T00:00Z"])
def test_bad_or_past_times(text: str) -> None:
    with pytest.raises(ValidationError):
        due_at(text, NOW)
