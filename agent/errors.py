"""Errors raised by model adapters; the loop turns them into an `error` stop reason."""

from __future__ import annotations

from kanban.state.errors import KanbanError


class ModelError(KanbanError):
    """A model call failed."""

    names_endpoint = True  # its message says where the call went (retry.at_endpoint)


class FatalModelError(ModelError):
    """Retrying cannot help: bad credentials, no permission, unknown model or provider."""


class TransientModelError(ModelError):
    """The provider kept failing (429, 5xx, connection, timeout) after all retries."""


class OutageError(TransientModelError):
    """The provider says it is down or overloaded (503, 529, refused connection): a
    fallback model is worth trying at once."""


class ContextOverflowError(ModelError):
    """The request is longer than the model's context window."""
