"""Errors raised by model adapters; the loop turns them into an `error` stop reason."""

from __future__ import annotations

from state.errors import KanbanError


class ModelError(KanbanError):
    """A model call failed."""


class FatalModelError(ModelError):
    """Retrying cannot help: bad credentials, no permission, unknown model or provider."""


class TransientModelError(ModelError):
    """The provider kept failing (429, 5xx, connection, timeout) after all retries."""
