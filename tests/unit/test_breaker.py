"""The dispatcher's circuit breaker: opens after several infrastructure failures in a row,
probes with backoff, closes by itself; a success in between starts the count over."""

from __future__ import annotations

from kanban.dispatcher.breaker import Breaker
from kanban.state.retry import Backoff


def test_opens_only_after_the_threshold_in_a_row() -> None:
    b = Breaker(threshold=3)
    assert not b.failed("one") and not b.failed("two")
    b.succeeded()  # a worker used the database: the count starts over
    assert not b.failed("one") and not b.failed("two")
    assert b.failed("three") and b.is_open and b.reason == "three"
    assert not b.failed("four")  # already open: only the first failure opens it


def test_probes_back_off_and_closing_resets() -> None:
    b = Breaker(threshold=1, probes=Backoff(first_s=10.0, cap_s=40.0))
    assert b.failed("disk full")
    first = b.next_probe
    assert not b.probe_due()  # not before its backoff
    b.probe_failed("still full")
    assert b.next_probe >= first and b.reason == "still full"
    b.next_probe = 0.0
    assert b.probe_due()
    assert b.close() >= 0.0
    assert not b.is_open and b.failures == 0 and not b.probe_due()
