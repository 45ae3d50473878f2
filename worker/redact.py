"""Keep credentials out of everything a worker stores or prints."""

from __future__ import annotations

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


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text
