"""Help text into Markdown that MkDocs renders as written: code spans kept, other
Markdown punctuation escaped, click's no-rewrap paragraphs (`\\b`) as code blocks."""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Sequence

_SPECIAL = re.compile(r"([\\*_\[\]])")  # would start emphasis or a link
_CODE = re.compile(r"(`[^`\n]*`)")
_BLOCK_START = re.compile(r"^(#|>|[-+] |\d+[.)] )")  # would make a heading, quote or list


def inline(text: str) -> str:
    """One line of prose: backtick code spans as they are, the rest escaped."""
    parts = _CODE.split(" ".join(text.split()))
    for i in range(0, len(parts), 2):
        parts[i] = _SPECIAL.sub(r"\\\1", parts[i]).replace("<", "&lt;")
    line = "".join(parts)
    return "\\" + line if _BLOCK_START.match(line) else line


def paragraphs(text: str) -> list[str]:
    """A help text's lines of Markdown: each paragraph one line, and each of click's
    `\\b` paragraphs (kept as typed) a code block."""
    text = inspect.cleandoc(text.split("\f", 1)[0])
    lines: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        if not block.strip():
            continue
        if block.lstrip(" ").startswith("\b"):
            kept = textwrap.dedent(block.lstrip(" ")[1:].strip("\n"))
            lines += ["", "```text", *kept.splitlines(), "```"]
        else:
            lines += ["", inline(block)]
    return lines[1:]


def either(words: Sequence[str]) -> str:
    """`a`, `a or b`, `a, b or c`."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"
