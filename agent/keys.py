"""Several API keys for one provider, used in turn when one is rate limited."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

C = TypeVar("C")


class KeyRing(Generic[C]):
    """One SDK client per key, made when first needed. A 429 on the active key moves to the
    next key not refused since the last success; when every key was refused, the caller
    backs off as usual."""

    def __init__(self, keys: Sequence[str], make_client: Callable[[str], C]) -> None:
        if not keys:
            raise ValueError("KeyRing needs at least one key")
        self.keys = list(keys)
        self._make = make_client
        self._clients: dict[int, C] = {}
        self.active = 0
        self._refused: set[int] = set()

    @property
    def client(self) -> C:
        if self.active not in self._clients:
            self._clients[self.active] = self._make(self.keys[self.active])
        return self._clients[self.active]

    def begin(self) -> None:
        """A new call: every key may be tried again."""
        self._refused.clear()

    def rotate(self) -> bool:
        """The active key was refused; True when another key is now active. When every key
        was refused, False (the caller backs off) and they all get another chance after."""
        self._refused.add(self.active)
        for step in range(1, len(self.keys)):
            candidate = (self.active + step) % len(self.keys)
            if candidate not in self._refused:
                self.active = candidate
                return True
        self._refused.clear()
        return False

    def close(self) -> None:
        for client in self._clients.values():
            close = getattr(client, "close", None)
            if close is not None:
                close()
        self._clients.clear()
