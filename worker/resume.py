"""A claimed card continues its stored conversation: after a delegation (the children's
results become the delegate call's result) or after a crash, lost lease or timeout.

Every completed turn was committed before the next model call, so the last run of the
card's current attempts holds the whole conversation so far. A tool call whose result was
never recorded gets an error result: the worker died while it ran, and the model should
check before it repeats the call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kanban.agent.types import Message
from kanban.children import Delegation, children_status
from kanban.records import CardRecord, MessageRecord
from kanban.state.rows import with_times
from kanban.state.store import Conn
from kanban.tools.delegate import report

DIED = ("no result was recorded: the worker stopped while this call ran. Check whether it "
        "took effect before you repeat it.")
RESUMED = "(The run was resumed; the conversation continues from its last recorded turn.)"


def resumed_run(conn: Conn, card: CardRecord, run_id: int) -> int | None:
    """The run whose conversation `run_id` continues, if any: the card's last run since its
    last manual retry, other than `run_id`, that stored messages."""
    row = conn.one(
        "SELECT r.id FROM run r WHERE r.card_id = :card AND r.id <> :run AND r.attempt > :base "
        "AND EXISTS (SELECT 1 FROM message m WHERE m.run_id = r.id) ORDER BY r.id DESC LIMIT 1",
        {"card": card.id, "run": run_id, "base": card.resume_base})
    return None if row is None else int(row[0])


def stored_conversation(conn: Conn, card: CardRecord, run_id: int) -> list[Message] | None:
    """The conversation to continue (None: start afresh): the messages of the card's last
    run since its last manual retry, other than `run_id`, with every tool call answered."""
    source = resumed_run(conn, card, run_id)
    if source is None:
        return None
    rows = conn.maps("SELECT * FROM message WHERE run_id = :run ORDER BY seq", {"run": source})
    messages = [Message.from_dict(_as_dict(MessageRecord.from_row(with_times(r))))
                for r in rows]
    if not any(m.role == "assistant" for m in messages):
        return None  # it never reached the model: nothing to continue
    delegation = Delegation.from_json(card.waiting_on) if card.waiting_on else None
    if delegation is None or not delegation.children:
        return answer_every_call(messages, None, None)
    delegated = report(children_status(conn, delegation.children), delegation.not_granted)
    call = delegation.call_id or _last_call(messages, "delegate")
    return answer_every_call(messages, call, delegated)


def _as_dict(record: MessageRecord) -> dict[str, Any]:
    data = record.to_json()
    extra = json.loads(record.data) if record.data else {}
    if extra.get("reasoning_data"):
        data["reasoning_data"] = extra["reasoning_data"]
    return data


def _last_call(messages: Sequence[Message], name: str) -> str | None:
    for message in reversed(messages):
        for call in reversed(message.tool_calls):
            if call.name == name:
                return call.id
    return None


def answer_every_call(messages: Sequence[Message], delegate_call: str | None,
                      delegated: str | None) -> list[Message]:
    """`messages` with the delegate call's result replaced by the children's report and an
    error result for each call that has none (placed right after its turn's results)."""
    out: list[Message] = []
    pending: list[Message] = []  # the calls of the last assistant message not yet answered

    def close_turn() -> None:
        for call in pending:
            out.append(_result_for(call, delegate_call, delegated))
        pending.clear()

    for message in messages:
        if message.role == "tool":
            match = next((c for c in pending if c.tool_call_id == message.tool_call_id), None)
            if match is None:
                continue  # a result without its call cannot be sent to any provider
            pending.remove(match)
            if delegated is not None and message.tool_call_id == delegate_call:
                message = Message("tool", delegated, tool_call_id=message.tool_call_id,
                                  name=message.name)
            out.append(message)
            continue
        close_turn()
        out.append(message)
        if message.role == "assistant":
            pending.extend(Message("tool", None, tool_call_id=c.id, name=c.name)
                           for c in message.tool_calls)
    close_turn()
    if out and out[-1].role == "assistant":
        out.append(Message("user", RESUMED))  # the model speaks next
    return out


def _result_for(call: Message, delegate_call: str | None, delegated: str | None) -> Message:
    if delegated is not None and call.tool_call_id == delegate_call:
        return Message("tool", delegated, tool_call_id=call.tool_call_id, name=call.name)
    return Message("tool", DIED, tool_call_id=call.tool_call_id, name=call.name, is_error=True)
