"""A model that hands the conversation to the next model when one keeps failing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kanban.agent.errors import TransientModelError
from kanban.agent.types import Message, Model, ModelResponse, OnEvent, ToolSpec

OnFallback = Callable[[str, str, str], None]


class FallbackModel:
    """Tries its models in order: when the active one's retries are spent on retryable
    errors, or it reports an outage, the same call goes to the next one, which then answers
    the rest of the run. Fatal errors (bad key, unknown model) are not handed on.

    Messages are provider-neutral, so each model's adapter renders the conversation in its
    own wire format; reasoning blocks of another format are dropped on the way.
    """

    def __init__(self, models: Sequence[Model], on_fallback: OnFallback | None = None) -> None:
        if not models:
            raise ValueError("FallbackModel needs at least one model")
        self.models = list(models)
        self.active = 0
        self.on_fallback = on_fallback or (lambda old, new, reason: None)

    @property
    def name(self) -> str:
        return self.models[self.active].name

    @property
    def interruptible(self) -> bool:
        """Whether each of its models stops by itself when the run's switch is thrown."""
        return all(getattr(model, "interruptible", False) for model in self.models)

    @property
    def chain(self) -> list[str]:
        return [m.name for m in self.models]

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> ModelResponse:
        return self._call(lambda model: model.complete(messages, tools))

    def stream(self, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent) -> ModelResponse:
        return self._call(lambda model: call_model(model, messages, tools, on_event))

    def _call(self, attempt: Callable[[Model], ModelResponse]) -> ModelResponse:
        while True:
            model = self.models[self.active]
            try:
                return attempt(model)
            except TransientModelError as exc:
                if self.active + 1 >= len(self.models):
                    raise
                old = self.name
                self.active += 1
                self.on_fallback(old, self.name, exc.message)

    def close(self) -> None:
        for model in self.models:
            close = getattr(model, "close", None)
            if close is not None:
                close()


def call_model(model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec],
               on_event: OnEvent | None) -> ModelResponse:
    """Stream when the model can and someone listens; else a plain `complete`."""
    stream = getattr(model, "stream", None)
    if on_event is not None and stream is not None:
        response: ModelResponse = stream(messages, tools, on_event)
        return response
    return model.complete(messages, tools)
