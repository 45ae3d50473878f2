"""Keep credentials out of everything a worker stores or prints: the values themselves and
their base64 forms (a model or server that echoes a key may well encode it)."""

from __future__ import annotations

import base64
import functools
from collections.abc import Iterable, Mapping

_SECRET_SUFFIXES = ("_API_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
_MIN_SECRET = 8  # shorter values would redact ordinary words
MASK = "[redacted]"


def secrets_in(env: Mapping[str, str]) -> list[str]:
    """The values of credential-like variables, longest first."""
    found = {value for name, value in env.items()
             if name.endswith(_SECRET_SUFFIXES) and len(value) >= _MIN_SECRET
             and name != "KANBAN_CLAIM_TOKEN"}
    return sorted(found, key=len, reverse=True)


def base64_forms(secret: str) -> set[str]:
    """The characters a secret always becomes inside base64 text, wherever it starts: for
    each of the three byte alignments, the base64 characters made only of its own bits
    (standard and URL-safe alphabets)."""
    raw = secret.encode()
    forms: set[str] = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode()
        first = -(-8 * offset // 6)  # the first character without a padding byte's bits
        last = 8 * (offset + len(raw)) // 6  # past the last character wholly of the secret
        core = encoded[first:last]
        if len(core) >= _MIN_SECRET:
            forms.update((core, core.replace("+", "-").replace("/", "_")))
    return forms


@functools.lru_cache(maxsize=16)
def _patterns(secrets: tuple[str, ...]) -> tuple[str, ...]:
    every = {form for secret in secrets if len(secret) >= _MIN_SECRET  # any source's
             for form in (secret, *base64_forms(secret))}
    return tuple(sorted(every, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret, and its base64 forms, masked."""
    for pattern in _patterns(tuple(secrets)):
        if pattern in text:
            text = text.replace(pattern, MASK)
    return text
