"""Text a model, a provider or a user wrote, made safe to store and to show.

Terminals obey control characters: an escape sequence in a card's title or a model's answer
could retitle the window, clear the screen or write the clipboard (OSC 52), and bidi
overrides make text read differently from what it is. Input is filtered (`strip_controls`);
every face shows stored text through `visible`, which spells each control out instead.
"""

from __future__ import annotations

import os
import re

# Escape sequences whole: CSI (ESC [ ... final), OSC (ESC ] ... BEL or ST), two-byte ones;
# and the 8-bit CSI/OSC introducers with their bodies.
_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                       r"|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]|\x9d[^\x07\x1b\x9c]*(?:\x07|\x9c)?")
# C0 but tab and newline, DEL, C1, and the bidi embeddings, overrides and isolates.
UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{UNSAFE}]")
_UNSAFE_OR_NEWLINE = re.compile(f"[{UNSAFE}\n\t]")
# The CLI's own colours travel marked with a key this process drew at start: stored text
# cannot carry the mark (it was written before the key existed), so any escape sequence in
# it is spelled out like every other control, colour codes included.
_KEY = os.urandom(8).hex()  # as secrets.token_hex, without importing hmac and OpenSSL
_OWN_SGR = re.compile(f"\x1b{_KEY}\\[([0-9;]*)m")


def has_controls(text: str) -> bool:
    return _UNSAFE.search(text) is not None


def strip_controls(text: str) -> str:
    """Text with escape sequences and control characters removed (tabs and newlines kept;
    a carriage return before a newline dropped, others become newlines)."""
    text = _SEQUENCE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _UNSAFE.sub("", text)


def _spell(match: re.Match[str]) -> str:
    char = match.group()
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def visible(text: str, *, one_line: bool = False) -> str:
    """Stored text as a terminal or page may show it: each control spelled out (`\\x1b`);
    with `one_line`, newlines and tabs too."""
    pattern = _UNSAFE_OR_NEWLINE if one_line else _UNSAFE
    return pattern.sub(_spell, text)


def colour(codes: str) -> str:
    """An SGR sequence (`31`, `1;31`, `0`) that `visible_line` lets through: the CLI's own."""
    return f"\x1b{_KEY}[{codes}m"


def visible_line(line: str) -> str:
    """One line the CLI prints: controls spelled out, except the colours it added itself
    (made with `colour`); an SGR code inside stored text is spelled out."""
    if "\x1b" not in line:
        return _UNSAFE.sub(_spell, line)
    parts, last = [], 0
    for match in _OWN_SGR.finditer(line):
        parts.append(_UNSAFE.sub(_spell, line[last:match.start()]))
        parts.append(f"\x1b[{match.group(1)}m")
        last = match.end()
    parts.append(_UNSAFE.sub(_spell, line[last:]))
    return "".join(parts)


def json_safe(encoded: str) -> str:
    """JSON text (json.dumps with ensure_ascii=False) with C1 and bidi characters escaped
    as \\uXXXX: still the same JSON, but inert on a terminal."""
    return re.sub("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]",
                  lambda m: f"\\u{ord(m.group()):04x}", encoded)


def cut_middle(text: str, limit: int) -> str:
    """`text`, or its head and tail within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    marker = f"\n[... {{}} of {len(text):,} characters cut ...]\n"
    keep = max(0, limit - len(marker) - 12)
    head, tail = keep // 2, keep - keep // 2
    return text[:head] + marker.format(f"{len(text) - head - tail:,}") + \
        (text[-tail:] if tail else "")


def clean_text(text: str, limit: int) -> str:
    """Model text fit to store as a card's summary or error: no controls, within `limit`."""
    return cut_middle(strip_controls(text), limit)
