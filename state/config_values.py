"""Typed TOML tables into frozen dataclasses: each value checked against its key's
declaration (kanban.state.config_keys): its kind, range and allowed values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import Field, replace
from typing import Any

from kanban.state.config_keys import Key, Kind, keys
from kanban.state.errors import ConfigError

# The providers a model spec may name (kept equal to kanban.agent.model.PROVIDERS by a test;
# the store does not import the agent runtime).
MODEL_PROVIDERS = ("openai", "openai-responses", "anthropic", "scripted")


def build(cls: type, values: Any, where: str, base: Any = None) -> Any:
    """A `cls` (or `base` with the table's keys replaced) from a table of its keys."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{where} must be a table")
    declared = keys(cls)
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in declared:
            raise ConfigError(f"{where}: unknown key {key!r}")
        item, spec = declared[key]
        kwargs[key] = checked(item, spec, value, f"{where}.{key}")
    required = [key for key, (_, spec) in declared.items() if spec.required]
    if any(key not in values for key in required):
        raise ConfigError(f"{where} needs {' and '.join(required)}")
    return replace(base, **kwargs) if base is not None else cls(**kwargs)


def checked(item: Field[Any], spec: Key, value: Any, where: str) -> Any:
    """One key's value, converted by its kind and held to its range and choices."""
    value = kind_of(item, spec).coerce(value, where)
    problem = spec.range.problem(value) if spec.range is not None else None
    if problem is None and isinstance(value, str):
        problem = spec.choice_problem(value)
    if problem is not None:
        raise ConfigError(f"{where}{problem}")
    return value


def kind_of(item: Field[Any], spec: Key) -> Kind:
    """The key's declared kind, else the one its field's annotation implies."""
    if spec.kind is not None:
        return spec.kind
    annotation = str(item.type).removesuffix(" | None")  # None: only when the key is absent
    if annotation not in ANNOTATED:
        raise TypeError(f"{item.name}: no config kind for {annotation!r}; declare kind=")
    return ANNOTATED[annotation]


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false")
    return value


def _integer(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where} must be a non-negative integer")
    return value


def _positive(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where} must be a positive number")
    return float(value)


def _non_negative(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{where} must be a non-negative number")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings")
    return tuple(value)


def _string_or_list(value: Any, where: str) -> tuple[str, ...]:
    return _strings([value] if isinstance(value, str) else value, where)


def _string_table(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{where} must be a table of strings")
    return dict(value)


def model_spec_problem(spec: str) -> str | None:
    """Why `spec` is not a model spec (`provider:MODEL`), or None when it is one."""
    provider, colon, name = spec.partition(":")
    if not colon or not name.strip():
        return "a model spec looks like openai:MODEL, anthropic:MODEL or scripted:NAME"
    if provider not in MODEL_PROVIDERS:
        return f"unknown provider {provider!r} (known: {', '.join(MODEL_PROVIDERS)})"
    return None


def _model(value: Any, where: str) -> str:
    problem = model_spec_problem(_text(value, where))
    if problem:
        raise ConfigError(f"{where} = {value!r}: {problem}")
    return str(value)


def _models(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_model(spec, where) for spec in _strings(value, where))


def _url(value: Any, where: str) -> str:
    if not _text(value, where).startswith(("http://", "https://")):
        raise ConfigError(f"{where} = {value!r}: must be an http:// or https:// URL")
    return str(value)


def _regexes(value: Any, where: str) -> tuple[str, ...]:
    patterns = _strings(value, where)
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{where}: bad regex {pattern!r}: {exc}") from None
    return patterns


def _network(value: Any, where: str) -> Any:
    from kanban.state.network import parse_network  # only when a config file gives one

    return parse_network(value, where)


def _host_addresses(value: Any, where: str) -> dict[str, str]:
    from kanban.state.network import parse_pins

    return parse_pins(value, where)


def _hook_names(value: Any, where: str) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(v, str) and ":" in v for v in names):
        raise ConfigError(f"{where} must list \"package.module:function\" names")
    return tuple(names)


BOOLEAN = Kind("boolean", _boolean)
INTEGER = Kind("non-negative integer", _integer)
NUMBER = Kind("positive number", _positive)
NON_NEGATIVE = Kind("non-negative number", _non_negative)
TEXT = Kind("string", _text)
STRINGS = Kind("list of strings", _strings)
STRING_OR_LIST = Kind("string or list of strings", _string_or_list)
STRING_TABLE = Kind("table of strings", _string_table)
NETWORK = Kind("boolean or list of host patterns", _network)
HOST_ADDRESSES = Kind('table of host = "IP address"', _host_addresses)
MODEL = Kind("model spec (provider:MODEL)", _model)
MODELS = Kind("list of model specs", _models)
URL = Kind("http:// or https:// URL", _url)
REGEXES = Kind("list of regular expressions", _regexes)
HOOK_NAMES = Kind('"package.module:function" or a list of them', _hook_names)

# What a field's annotation implies when its key declares no kind.
ANNOTATED: dict[str, Kind] = {
    "bool": BOOLEAN, "int": INTEGER, "float": NUMBER, "str": TEXT,
    "tuple[str, ...]": STRINGS, "Mapping[str, str]": STRING_TABLE,
}
