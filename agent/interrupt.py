"""Stopping a run from another thread, even in the middle of a streaming model call."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from kanban.agent.errors import ModelError

T = TypeVar("T")


class Interrupted(ModelError):
    """The run was interrupted (its card was cancelled, its lease lost, a user pressed ^C)."""


class Interrupt:
    """A one-way switch: once `cancel` is called, every wait on it ends at once."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "interrupted") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

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

    def call(self, work: Callable[[], T]) -> T:
        """Run `work` in a helper thread and return its result, or raise Interrupted as soon
        as the switch is thrown: a blocked network read cannot hold the run hostage.

        The abandoned call finishes (or fails) on its own; its result is dropped.
        """
        self.check()
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

        threading.Thread(target=target, name="model-call", daemon=True).start()
        while not done.wait(0.05):
            if self._event.is_set():
                raise Interrupted(self.reason or "interrupted")
        if errors:
            raise errors[0]
        return box[0]
