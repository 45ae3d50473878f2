"""Interrupt.call: one call thread kept from call to call, a thread of its own for a call
made while another runs, and an interrupted call abandoned at once."""

from __future__ import annotations

import gc
import threading

import pytest

from kanban.agent.errors import TransientModelError
from kanban.agent.interrupt import Interrupt, Interrupted, current
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


def test_a_call_made_here_runs_on_this_thread_and_knows_its_switch() -> None:
    interrupt = Interrupt()
    seen = interrupt.call(lambda: (threading.get_ident(), current()), here=True)
    assert seen == (threading.get_ident(), interrupt)
    assert current() is None and interrupt._caller is None  # no helper thread was made


def test_a_call_made_here_is_stopped_by_what_it_watches() -> None:
    """The switch thrown from another thread calls the watcher, which ends the wait; what
    the stopped call then raises reads as the interruption."""
    interrupt = Interrupt()
    unblock = threading.Event()

    def blocked() -> None:
        switch = current()
        assert switch is not None
        forget = switch.watch(unblock.set)
        try:
            unblock.wait(30)
            raise OSError("the socket was shut down")
        finally:
            forget()

    threading.Timer(0.05, interrupt.cancel, args=("cancelled",)).start()
    with pytest.raises(Interrupted, match="cancelled"):
        interrupt.call(blocked, here=True)


def test_an_answer_that_arrives_as_the_switch_is_thrown_is_dropped() -> None:
    interrupt = Interrupt()

    def answered_late() -> str:
        interrupt.cancel("cancelled")
        return "answer"

    with pytest.raises(Interrupted, match="cancelled"):
        interrupt.call(answered_late, here=True)


def test_watchers_are_told_once_and_a_forgotten_one_not_at_all() -> None:
    interrupt = Interrupt()
    told: list[str] = []
    interrupt.watch(lambda: told.append("a"))
    forget = interrupt.watch(lambda: told.append("b"))
    interrupt.watch(lambda: 1 / 0)  # a watcher that fails keeps no other from being told
    interrupt.watch(lambda: told.append("c"))
    forget()
    interrupt.cancel("one")
    interrupt.cancel("two")
    assert told == ["a", "c"] and interrupt.reason == "one"
    interrupt.watch(lambda: told.append("late"))  # thrown already: told at once
    assert told == ["a", "c", "late"]


def test_a_helper_call_waits_without_waking_until_it_ends() -> None:
    """The caller sleeps on the call and the switch at once, instead of looking every 50 ms:
    400 workers waiting on their models woke 8,000 times a second."""
    interrupt = Interrupt()
    release = threading.Event()
    threading.Timer(0.3, release.set).start()
    assert interrupt.call(lambda: release.wait(30)) is True
    assert interrupt._watchers == []  # its wait forgotten once over
