"""Agent hooks of a worker: store the transcript and usage, remind once to finish."""

from __future__ import annotations

from agent.hooks import AgentHooks
from agent.types import Message, Usage
from kanban import claims
from tools.scope import WorkerScope

REMINDER = (
    "You have not finished your card. Call kanban_complete with a summary of your result, "
    "or kanban_block with the reason you cannot go on."
)


class WorkerHooks(AgentHooks):
    def __init__(self, scope: WorkerScope) -> None:
        self.scope = scope
        self.seq = 0
        self.reminded = False

    def on_message(self, message: Message) -> None:
        # The run is over once the card is finished; later messages are not its record.
        if self.scope.finished and message.role != "tool":
            return
        self.seq += 1
        with self.scope.fenced() if not self.scope.finished else self.scope.kb.db.write() as conn:
            claims.append_message(conn, self.scope.run_id, self.seq, message.to_dict(),
                                  now=self.scope.kb.clock())

    def on_usage(self, usage: Usage, model_name: str) -> None:
        with self.scope.fenced() as conn:
            claims.record_usage(conn, self.scope.run_id, self.scope.card_id, model_name,
                                input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens,
                                cached_tokens=usage.cached_tokens, now=self.scope.kb.clock())

    def on_final_text(self, text: str) -> str | None:
        if self.scope.finished or self.reminded:
            return None
        self.reminded = True
        return REMINDER
