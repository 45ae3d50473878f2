"""The PostgreSQL server's clock as a process carries it: samples tighten the estimate and a
process's readings do not step back (a message stamped before its run's end stays before)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kanban.state.pg_clock import CLOCK_RESYNC_S, HOLD_S, ServerClock

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


class Server:
    """A connection whose server reads its clock `delay` seconds into a round trip of
    `rtt`, on a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.offset = T0 - timedelta(seconds=self.mono)  # server time at monotonic 0
        self.rtt = self.delay = 0.0

    def monotonic(self) -> float:
        return self.mono

    def execute(self, sql: str) -> Server:
        assert sql == "SELECT clock_timestamp()"
        self.mono += self.delay
        self._read = self.offset + timedelta(seconds=self.mono)
        self.mono += self.rtt - self.delay
        return self

    def fetchone(self) -> tuple[datetime]:
        return (self._read,)

    def true_now(self) -> datetime:
        return self.offset + timedelta(seconds=self.mono)

    def sample(self, clock: ServerClock, rtt: float, delay: float) -> None:
        self.rtt, self.delay = rtt, delay
        clock.sample(self)


def error_ms(clock: ServerClock, server: Server) -> float:
    reading = clock.now()
    assert reading is not None
    return (reading - server.true_now()).total_seconds() * 1000


def test_samples_tighten_the_estimate_whatever_the_first_round_trip_was() -> None:
    server = Server()
    clock = ServerClock(server.monotonic)
    assert clock.now() is None and clock.stale
    server.sample(clock, rtt=0.200, delay=0.010)  # a loaded moment: read early in 200 ms
    assert abs(error_ms(clock, server) + 90) < 0.01  # the middle of the trip: 90 ms behind
    assert clock.uncertainty_s == pytest.approx(0.1)
    server.mono += 5
    server.sample(clock, rtt=0.004, delay=0.003)
    server.sample(clock, rtt=0.004, delay=0.001)
    assert clock.uncertainty_s is not None and clock.uncertainty_s <= 0.001
    assert abs(error_ms(clock, server)) <= 1.0  # moved forward at once


def test_a_reading_never_goes_back_when_a_sample_moves_the_estimate_back() -> None:
    server = Server()
    clock = ServerClock(server.monotonic)
    server.sample(clock, rtt=0.030, delay=0.030)  # read at the end: the estimate runs 15 ms late
    first = clock.now()
    assert first is not None
    server.mono += 0.004
    server.sample(clock, rtt=0.002, delay=0.001)  # the estimate moves 14 ms back
    later = clock.now()
    assert later is not None and later >= first
    server.mono += 0.020
    caught_up = clock.now()
    assert caught_up is not None and caught_up > first and abs(error_ms(clock, server)) <= 1.0


def test_a_server_clock_set_back_is_followed_not_held() -> None:
    server = Server()
    clock = ServerClock(server.monotonic)
    server.sample(clock, rtt=0.001, delay=0.0005)
    before = clock.now()
    assert before is not None
    server.offset -= timedelta(hours=1)
    server.mono += 1
    server.sample(clock, rtt=0.001, delay=0.0005)  # does not fit the old interval: starts over
    after = clock.now()
    assert after is not None and after < before - timedelta(seconds=HOLD_S)
    assert abs(error_ms(clock, server)) <= 1.0


def test_an_old_estimate_starts_over_and_a_loose_one_asks_for_samples() -> None:
    server = Server()
    clock = ServerClock(server.monotonic)
    server.sample(clock, rtt=0.001, delay=0.0005)
    assert not clock.stale
    server.mono += CLOCK_RESYNC_S + 1
    assert clock.stale
    server.offset += timedelta(milliseconds=0.2)  # drifted within the old bounds' reach
    server.sample(clock, rtt=0.050, delay=0.025)
    assert clock.uncertainty_s == pytest.approx(0.025)  # the new sample alone
    assert not clock.stale  # loose, but sampled just now
    server.mono += 1.5
    assert clock.stale  # loose and a second gone: the next connection samples again
