"""A profile's `network`: true, false, or a list of host patterns; one matcher for the
worker's proxy and the web tools, and the intersection a delegated card's network is.

A pattern is an exact host name (`pypi.org`), a wildcard over a domain's subdomains
(`*.pythonhosted.org`: `files.pythonhosted.org`, not `pythonhosted.org` itself) or an IP
address. Any port of an allowed host may be reached. A requested host is checked as text,
before any DNS lookup: it must be a plain name or address, and wildcards never match an
address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kanban.state.errors import ConfigError

Network = bool | tuple[str, ...]  # True: any host; False: none; a tuple: these patterns
MAX_PATTERNS = 256
MAX_HOST_CHARS = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_LABEL_UNDERSCORE = re.compile(r"^[a-z0-9_-]{1,63}$")  # in requested names (_dmarc, SRV)


def host_key(host: str) -> str | None:
    """`host` as compared (lowercase, no trailing dot, addresses in canonical form), or None
    when it is neither a plain DNS name nor an IP address."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    address = _address(text)
    if address is not None:
        return address
    text = text[:-1] if text.endswith(".") else text
    labels = text.split(".")
    if not text or len(text) > MAX_HOST_CHARS or labels[-1].isdigit() \
            or not all(_LABEL_UNDERSCORE.match(la) for la in labels):
        return None  # a numeric last label is an address in a form resolvers still take
    return text


def _address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a host pattern, or None."""
    if re.fullmatch(r"[^:\[\]]+:[0-9]+", pattern):
        return "a port is not part of a pattern (every port of an allowed host is reachable)"
    name = pattern[2:] if pattern.startswith("*.") else pattern
    if _address(name.strip("[]")) is not None:
        return None if name == pattern else "a wildcard cannot cover addresses"
    labels = name.lower().removesuffix(".").split(".")
    if not name or len(name) > MAX_HOST_CHARS or not all(_LABEL.match(la) for la in labels):
        return ("a pattern is a host name (letters, digits, '-', dots), *.domain or an IP "
                "address")
    return None


def parse_network(value: Any, where: str) -> Network:
    """The `network` key: true, false or a list of host patterns (an empty list is false)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be true or false, or a list of host names")
    if len(value) > MAX_PATTERNS:
        raise ConfigError(f"{where} lists more than {MAX_PATTERNS} hosts")
    for pattern in value:
        problem = pattern_problem(pattern)
        if problem:
            raise ConfigError(f"{where}: {pattern!r}: {problem}")
    return _normal(value) or False


def parse_pins(value: Any, where: str) -> dict[str, str]:
    """The `network_hosts` table: host name to the IP address it reaches (like curl's
    --resolve), used by the proxy and web_fetch instead of DNS."""
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where} must be a table of host name = \"IP address\"")
    if len(value) > MAX_PATTERNS:
        raise ConfigError(f"{where} names more than {MAX_PATTERNS} hosts")
    pins: dict[str, str] = {}
    for name, address in value.items():
        key = host_key(str(name))
        if key is None or _address(key) is not None:
            raise ConfigError(f"{where}: {name!r} is not a host name")
        if _address(address) is None:
            raise ConfigError(f"{where}.{name}: {address!r} is not an IP address")
        pins[key] = str(_address(address))
    return pins


def _normal(patterns: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    out = []
    for pattern in patterns:
        wild = pattern.startswith("*.")
        key = host_key(pattern[2:] if wild else pattern) or pattern.lower()
        out.append(f"*.{key}" if wild else key)
    return tuple(dict.fromkeys(out))


def matches(pattern: str, host: str) -> bool:
    """Does a normalised `pattern` cover the normalised `host`?"""
    if pattern.startswith("*."):
        return _address(host) is None and host.endswith(pattern[1:])
    return host == pattern


def intersect(a: Network, b: Network) -> Network:
    """The hosts both networks allow (what a delegated card gets from its ancestors)."""
    if a is True or b is False:
        return b
    if b is True or a is False:
        return a
    assert isinstance(a, tuple) and isinstance(b, tuple)
    kept = [p for p in a if _covered(p, b)] + [p for p in b if _covered(p, a)]
    return tuple(dict.fromkeys(kept)) or False


def _covered(pattern: str, patterns: tuple[str, ...]) -> bool:
    if not pattern.startswith("*."):
        return any(matches(p, pattern) for p in patterns)
    return any(p.startswith("*.") and (pattern == p or pattern.endswith(p[1:]))
               for p in patterns)


@dataclass(frozen=True)
class HostList:
    """A card's network list and its pinned addresses: what the proxy and web_fetch ask."""

    patterns: tuple[str, ...]
    pins: Mapping[str, str] = field(default_factory=dict)

    def refusal(self, host: str) -> str | None:
        """Why `host` may not be reached, one line for the model, or None."""
        key = host_key(host)
        if key is not None and any(matches(p, key) for p in self.patterns):
            return None
        shown = host if len(host) <= 100 else host[:100] + "..."
        return (f"host {shown!r} is not in this card's network list "
                f"({', '.join(self.patterns[:20])}); refused")

    def pinned(self, host: str) -> str | None:
        """The address the profile itself gives for `host` (a `network_hosts` pin, or a
        listed address), or None: use DNS."""
        key = host_key(host)
        if key is None:
            return None
        if _address(key) is not None and key in self.patterns:
            return key
        return self.pins.get(key)
