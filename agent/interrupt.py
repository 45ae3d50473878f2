"""Stopping a run from another thread, even in the middle of a streaming model call."""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

import kanban.agent.standby as standby
from kanban.agent.errors import ModelError

T = TypeVar("T")


class Interrupted(ModelError):
    """The run was interrupted (its card was cancelled, its lease lost, a user pressed ^C).
    Its message is the reason as given: no endpoint failed, whichever thread raised it."""

    names_endpoint = False


class _Caller:
    """A daemon thread running the calls handed to it, one at a time: kept from one model
    call to the next (a thread started per call cost more than a scripted call itself)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.busy = False
        standby.run_in_thread(self._serve, "model-call")

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    def run(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def stop(self) -> None:
        """The thread ends once its current call (if any) is over."""
        self._jobs.put(None)


_here = threading.local()  # the switch of the call running on this thread (`call(here=True)`)


def current() -> Interrupt | None:
    """The switch of the call this thread runs by itself (`Interrupt.call(..., here=True)`):
    what the call must watch to stop when it is thrown."""
    return getattr(_here, "interrupt", None)


class Interrupt:
    """A one-way switch: once `cancel` is called, every wait on it ends at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""
        self._caller: _Caller | None = None
        self._lock = threading.Lock()
        self._watchers: list[Callable[[], None]] = []

    def cancel(self, reason: str = "interrupted") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            watchers, self._watchers = self._watchers, []
        for stop in watchers:
            with suppress(Exception):  # one that fails keeps no other from being told
                stop()

    def watch(self, stop: Callable[[], None]) -> Callable[[], None]:
        """Have `stop` called once the switch is thrown (on the thread throwing it; at once
        if it was); returns what forgets it."""
        with self._lock:
            if not self._event.is_set():
                self._watchers.append(stop)
                return lambda: self._forget(stop)
        stop()
        return lambda: None

    def _forget(self, stop: Callable[[], None]) -> None:
        with self._lock, suppress(ValueError):
            self._watchers.remove(stop)

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        """Raise Interrupted once cancelled (called between streamed chunks)."""
        if self._event.is_set():
            raise Interrupted(self.reason or "interrupted")

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when cancelled meanwhile."""
        return self._event.wait(seconds)

    def call(self, work: Callable[[], T], *, here: bool = False) -> T:
        """Run `work` in a helper thread and return its result, or raise Interrupted as soon
        as the switch is thrown: a blocked network read cannot hold the run hostage.
        The abandoned call finishes (or fails) on its own; its result is dropped.

        `here`: `work` stops by itself when the switch is thrown (it watches `current()`,
        as a call through the model gateway does by hanging up its socket), so it runs on
        this thread, with no helper thread to keep nor to hand the answer over.
        """
        self.check()
        if here:
            return self._here(work)
        box: list[T] = []
        errors: list[BaseException] = []
        done = threading.Event()

        def target() -> None:
            try:
                box.append(work())
            except BaseException as exc:  # handed to the caller below
                errors.append(exc)
            finally:
                done.set()

        caller, shared = self._take_caller()
        forget = self.watch(done.set)  # a wait that ends with the call or the switch
        try:
            caller.run(target)
            if not shared:
                caller.stop()  # a thread for this one call
            done.wait()
        finally:
            forget()
        if not box and not errors:  # the switch, not the call
            if shared:
                self._drop(caller)  # abandoned: it ends once the call does
            raise Interrupted(self.reason or "interrupted")
        caller.busy = False
        if errors:
            raise errors[0]
        return box[0]

    def _here(self, work: Callable[[], T]) -> T:
        previous = current()
        _here.interrupt = self
        try:
            result = work()
        except Interrupted:
            raise
        except BaseException as exc:
            if self._event.is_set():  # what the stopped call raised: the switch's doing
                raise Interrupted(self.reason or "interrupted") from exc
            raise
        finally:
            _here.interrupt = previous
        self.check()  # thrown as it answered: the answer is dropped, as a helper's would be
        return result

    def _take_caller(self) -> tuple[_Caller, bool]:
        """This switch's call thread (True), or for a call made while another is running
        (calls from several threads at once), a thread of its own (False)."""
        with self._lock:
            if self._caller is None:
                self._caller = _Caller()
                weakref.finalize(self, self._caller.stop)  # no thread outlives its switch
            elif self._caller.busy:
                return _Caller(), False
            self._caller.busy = True
            return self._caller, True

    def _drop(self, caller: _Caller) -> None:
        with self._lock:
            if self._caller is caller:
                self._caller = None
        caller.stop()
