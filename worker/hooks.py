"""Agent hooks of a worker: commit each turn's transcript and usage (with cost) as it
completes (the answer, then its tool results), feed the live activity, record fallbacks,
compressions and hook errors, and remind the model once to finish its card."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kanban import claims, run_activity
from kanban.agent.hooks import AgentHooks
from kanban.agent.loop import AgentResult
from kanban.agent.types import (
    Message,
    ReasoningDelta,
    StreamEvent,
    StreamRestart,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResult,
    Usage,
)
from kanban.events import record_event
from kanban.state.store import Conn
from kanban.tools.scope import WorkerScope
from kanban.worker.activity import Activity
from kanban.worker.redact import redact
from kanban.worker.transcript import TranscriptCaps, stored_chars

REMINDER = (
    "You have not finished your card. Call kanban_complete with a summary of your result, "
    "or kanban_block with the reason you cannot go on."
)


class WorkerHooks(AgentHooks):
    def __init__(self, scope: WorkerScope, activity: Activity | None = None, *,
                 secrets: Sequence[str] = (), caps: TranscriptCaps | None = None) -> None:
        self.scope = scope
        self.activity = activity or Activity(max_turns=0)
        self.secrets = list(secrets)
        self.caps = caps or TranscriptCaps()
        self.stored: int | None = None  # the card's transcript so far, read at first commit
        self.seq = 0
        self.reminded = False
        self.tokens = 0
        self.cost = 0.0
        self._messages: list[dict[str, Any]] = []
        self._usages: list[tuple[Usage, str, float | None]] = []

    # --- the transcript: one transaction per turn ---------------------------------------

    def on_message(self, message: Message) -> None:
        data = message.to_dict()
        if self.secrets:
            for key in ("content", "reasoning"):
                if data.get(key):
                    data[key] = redact(data[key], self.secrets)
            for call in data.get("tool_calls") or ():
                call["arguments"] = redact(call["arguments"], self.secrets)
        self._messages.append(self.caps.bound(data))

    def on_usage(self, usage: Usage, model_name: str, cost: float | None = None) -> None:
        self._usages.append((usage, model_name, cost))
        self.tokens += usage.total_tokens
        self.cost += cost or 0.0
        self.activity.used(self.tokens, self.cost)

    def on_model_end(self, turn: int) -> None:
        self.commit()  # the answer is stored before its tools run (inside the lease)

    def on_turn_end(self, turn: int) -> None:
        self.commit()

    def on_finish(self, result: AgentResult) -> None:
        self.commit()
        self.activity.finished(str(result.stop_reason))

    def commit(self) -> None:
        """Store the messages and usage gathered since the last commit, all or nothing."""
        if not self._messages and not self._usages:
            return
        s = self.scope
        first = self.seq
        phase = None if s.finished else self.activity.take()

        def store(conn: Conn) -> None:
            if self._messages and claims.has_message(conn, s.run_id, first + 1):
                return  # an earlier try committed, though its COMMIT seemed to fail
            now = s.kb.clock()
            self._within_transcript_cap(conn)
            for n, data in enumerate(self._messages, start=first + 1):
                claims.append_message(conn, s.run_id, n, data, now=now)
            for usage, model, cost in self._usages:
                claims.record_usage(conn, s.run_id, s.card_id, model, now=now, cost=cost,
                                    input_tokens=usage.input_tokens,
                                    output_tokens=usage.output_tokens,
                                    cached_tokens=usage.cached_tokens)
            # The run row last: card before run is the order the heartbeat and the
            # transitions lock them in (PostgreSQL: a run locked first deadlocks with a
            # heartbeat, which then waits out deadlock_timeout, 1 s, of a short lease).
            if phase is not None:
                run_activity.record_activity(conn, s.run_id, s.card_id, s.claim_token, phase,
                                       now=now)

        # Tried again while the database is away (until the lease runs out). Once the card
        # is finished its lease is gone; the run's last turn is still its record.
        s.write(store, fenced=not s.finished, idempotent=bool(self._messages))
        self.seq = first + len(self._messages)
        self._messages.clear()
        self._usages.clear()

    def _within_transcript_cap(self, conn: Conn) -> None:
        """Past the card's cap, older tool results are stored cut, then new ones too."""
        if self.stored is None:
            self.stored = claims.transcript_chars(conn, self.scope.card_id)
        adding = sum(stored_chars(data) for data in self._messages)
        if self.stored + adding > self.caps.transcript_chars:
            self.stored -= claims.cut_tool_results(conn, self.scope.card_id,
                                                   self.caps.old_result_chars, self.caps.cut_old)
            if self.stored + adding > self.caps.transcript_chars:
                for data in self._messages:
                    if data.get("role") == "tool" and data.get("content"):
                        data["content"] = self.caps.cut_old(data["content"])
                adding = sum(stored_chars(data) for data in self._messages)
        self.stored += adding

    # --- live activity ----------------------------------------------------------------

    def on_model_start(self, turn: int, model_name: str) -> None:
        # What the model is about to read (the opening, a reminder) is stored, and the new
        # phase with it: one transaction, not a second one racing it from the watch thread
        # (two writers of one process meet SQLite's busy sleeps of 1, 2, 5 ms...).
        pending = bool(self._messages or self._usages)
        self.activity.model_call(turn, model_name, wake=not pending)
        self.commit()

    def on_event(self, event: StreamEvent) -> None:
        if isinstance(event, TextDelta):
            self.activity.streamed(len(event.text))
        elif isinstance(event, ReasoningDelta):
            self.activity.streamed(len(event.text), reasoning=True)
        elif isinstance(event, ToolCallDelta):
            self.activity.streamed(len(event.arguments), tool=event.name)
        elif isinstance(event, StreamRestart):
            self.activity.restart()

    def on_tool_start(self, call: ToolCall) -> None:
        self.activity.tool_started(call.name)

    def on_tool_end(self, call: ToolCall, result: ToolResult) -> None:
        self.activity.tool_ended(call.name)

    # --- things worth an event on the card ----------------------------------------------

    def on_fallback(self, old_model: str, new_model: str, reason: str) -> None:
        self._event("model_fallback", f"model {old_model} failed; continuing on {new_model}",
                    old=old_model, new=new_model, reason=redact(reason, self.secrets)[:500])

    def on_compress(self, summary: Message, replaced: int, tokens_before: int) -> None:
        self._event("context_compressed", f"summarised {replaced} messages "
                    f"(~{tokens_before:,} tokens before)", replaced=replaced,
                    tokens_before=tokens_before, summary_seq=self.seq + len(self._messages))

    def on_hook_error(self, hook: str, message: str) -> None:
        self._event("hook_error", f"hook {hook} failed: {message}", hook=hook,
                    error=redact(message, self.secrets)[:500])

    def _event(self, kind: str, line: str, **data: Any) -> None:
        print(f"card #{self.scope.card_id}: {line}", flush=True)
        s = self.scope
        with s.fenced() if not s.finished else s.kb.db.write() as conn:
            record_event(conn, board=s.board, card_id=s.card_id, run_id=s.run_id, kind=kind,
                         actor=s.actor.name, at=s.kb.clock(), **data)

    # --- the worker protocol ----------------------------------------------------------

    def on_final_text(self, text: str) -> str | None:
        if self.scope.finished or self.reminded:
            return None
        self.reminded = True
        return REMINDER
