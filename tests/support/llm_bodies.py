"""Reading a request body of any of the three wire formats, for responders and tests."""

from __future__ import annotations

from typing import Any


def _conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat and Messages bodies keep it in `messages`, Responses bodies in `input`."""
    if "messages" in body:
        return list(body["messages"])
    items = body.get("input", [])
    return [{"role": "user", "content": items}] if isinstance(items, str) else list(items)


def called_tools(body: dict[str, Any]) -> list[str]:
    """Names of the tools the assistant called so far in this conversation, in order."""
    names: list[str] = []
    for message in _conversation(body):
        if message.get("type") == "function_call":
            names.append(message["name"])
        if message.get("role") != "assistant":
            continue
        names += [call["function"]["name"] for call in message.get("tool_calls") or []]
        names += [b["name"] for b in _blocks(message) if b.get("type") == "tool_use"]
    return names


def tool_results(body: dict[str, Any]) -> list[str]:
    """The contents of every tool result in this conversation, in order."""
    results: list[str] = []
    for message in _conversation(body):
        if message.get("type") == "function_call_output":
            results.append(str(message.get("output") or ""))
        if message.get("role") == "tool":
            results.append(str(message.get("content") or ""))
        blocks = [b for b in _blocks(message) if b.get("type") == "tool_result"]
        results += [_block_text(b.get("content")) for b in blocks]
    return results


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the latest user message (tool results left out)."""
    for message in reversed(_conversation(body)):
        if message.get("role") != "user":
            continue
        if isinstance(message.get("content"), str):
            return message["content"]
        texts = [b.get("text", "") for b in _blocks(message) if b.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _block_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content or "")


def system_text(body: dict[str, Any]) -> str:
    """The system prompt of a request in any of the three formats."""
    if "instructions" in body:
        return str(body.get("instructions") or "")
    system = body.get("system")
    if isinstance(system, list):
        return "".join(b.get("text", "") for b in system if isinstance(b, dict))
    if isinstance(system, str):
        return system
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", [])
                     if m.get("role") == "system")
