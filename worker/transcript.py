"""A card's stored transcript, bounded: one message keeps its head and tail past
`message_chars` (saying how long it was), and past `transcript_chars` for the whole card
its older tool results are stored cut, so that no model can grow the database without end.
The conversation the model sees is not touched: only what is stored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kanban.state.config import Profile
from kanban.textsafety import cut_middle

KEEP_OF_CALL = 1_000  # characters of a cut call's arguments kept at each end


@dataclass(frozen=True)
class TranscriptCaps:
    message_chars: int = 64_000
    transcript_chars: int = 4_000_000
    old_result_chars: int = 1_000  # what an older tool result keeps past the card's cap

    def bound(self, data: dict[str, Any]) -> dict[str, Any]:
        """A stored message (`Message.to_dict()`) within `message_chars` per field."""
        for key in ("content", "reasoning"):
            value = data.get(key)
            if isinstance(value, str) and len(value) > self.message_chars:
                data[key] = cut_middle(value, self.message_chars)
        for call in data.get("tool_calls") or ():
            arguments = call.get("arguments") or ""
            if len(arguments) > self.message_chars:
                call["arguments"] = json.dumps({
                    "cut": f"arguments of {len(arguments):,} characters; head and tail kept",
                    "head": arguments[:KEEP_OF_CALL], "tail": arguments[-KEEP_OF_CALL:]},
                    ensure_ascii=False)
        return data

    def cut_old(self, content: str) -> str:
        return cut_middle(content, self.old_result_chars)


def stored_chars(data: dict[str, Any]) -> int:
    """What a stored message counts against its card's transcript cap."""
    calls = data.get("tool_calls")
    return (len(data.get("content") or "") + len(data.get("reasoning") or "")
            + (len(json.dumps(calls)) if calls else 0))


def transcript_caps(profile: Profile) -> TranscriptCaps:
    return TranscriptCaps(message_chars=profile.max_message_chars,
                          transcript_chars=profile.max_transcript_chars)
