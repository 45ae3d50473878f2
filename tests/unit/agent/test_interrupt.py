"""Interrupt.call: one call thread kept from call to call, a thread of its own for a call
made while another runs, and an interrupted call abandoned at once."""

from __future__ import annotations

import gc
import threading

import pytest

from kanban.agent.errors import TransientModelError
from kanban.agent.interrupt import Interrupt, Interrupted
from kanban.agent.retry import at_endpoint
from tests.support.procs import wait_until


def test_calls_reuse_one_thread() -> None:
    interrupt = Interrupt()
    idents = {interrupt.call(threading.get_ident) for _ in range(5)}
    assert len(idents) == 1 and threading.get_ident() not in idents


def test_a_call_made_while_another_runs_is_not_queued_behind_it() -> None:
    interrupt = Interrupt()
    release = threading.Event()
    first: list[str] = []
    slow = threading.Thread(target=lambda: first.append(interrupt.call(
        lambda: "slow" if release.wait(30) else "timed out")))
    slow.start()
    wait_until(lambda: interrupt._caller is not None and interrupt._caller.busy, timeout=10,
               what="the first call under way")
    assert interrupt.call(lambda: "quick") == "quick"  # the slow call still holds its thread
    release.set()
    slow.join(timeout=10)
    assert first == ["slow"]


def test_an_interrupted_call_is_abandoned_and_its_thread_ends_after_it() -> None:
    interrupt = Interrupt()
    release = threading.Event()
    ran_in: list[threading.Thread] = []

    def blocked() -> None:
        ran_in.append(threading.current_thread())
        release.wait(30)

    threading.Timer(0.05, interrupt.cancel, args=("cancelled",)).start()
    with pytest.raises(Interrupted, match="cancelled"):
        interrupt.call(blocked)
    assert ran_in[0].is_alive()  # still in its call: abandoned, not waited for
    release.set()
    wait_until(lambda: not ran_in[0].is_alive(), timeout=10,
               what="the abandoned call's thread to end")
    with pytest.raises(Interrupted):
        interrupt.call(lambda: None)  # a cancelled switch runs nothing more


def test_no_call_thread_outlives_its_switch() -> None:
    interrupt = Interrupt()
    thread = interrupt.call(threading.current_thread)
    assert thread.is_alive()  # kept for the next call
    del interrupt
    gc.collect()
    wait_until(lambda: not thread.is_alive(), timeout=10,
               what="the call thread to end with its switch")


def test_errors_reach_the_caller() -> None:
    interrupt = Interrupt()

    def broken() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        interrupt.call(broken)
    assert interrupt.call(lambda: 7) == 7  # and the thread goes on serving


def test_an_interruption_keeps_its_reason_wherever_it_was_raised() -> None:
    """Raised inside a streaming call (by a listener between chunks), an interruption passes
    through the adapter's retry layer, which names the endpoint on every model error: the
    run's error must still read as the reason given (it did not under load, when the call's
    thread won the race: "the card was cancelled (at 127.0.0.1:43957/v1)")."""
    assert at_endpoint(Interrupted("the card was cancelled"), "127.0.0.1:1/v1").message == \
        "the card was cancelled"
    failed = at_endpoint(TransientModelError("openai: 500"), "127.0.0.1:1/v1")
    assert failed.message == "openai: 500 (at 127.0.0.1:1/v1)"
