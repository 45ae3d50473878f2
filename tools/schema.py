"""A validator for the JSON-Schema subset tools use: type, enum, lengths, ranges,
properties, required, additionalProperties and items."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

JSON_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


def validate(value: Any, schema: dict[str, Any], path: str = "") -> str | None:
    """The first way `value` breaks `schema` (type, enum, bounds, properties, items), or None."""
    checks: Sequence[Callable[[Any, dict[str, Any], str], str | None]] = (
        _check_type,
        _check_enum,
        _check_length,
        _check_range,
        _check_object,
        _check_array,
    )
    for check in checks:
        problem = check(value, schema, path)
        if problem:
            return problem
    return None


def _check_type(value: Any, schema: dict[str, Any], path: str) -> str | None:
    expected = schema.get("type")
    if expected is None:
        return None
    allowed = [expected] if isinstance(expected, str) else list(expected)
    if any(_is_type(value, kind) for kind in allowed):
        return None
    return f"{_field(path)} must be of type {' or '.join(allowed)}, got {json_type(value)}"


def _check_enum(value: Any, schema: dict[str, Any], path: str) -> str | None:
    options = schema.get("enum")
    if options is None or value in options:
        return None
    return f"{_field(path)} must be one of: {', '.join(json.dumps(o) for o in options)}"


def _check_length(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, str):
        return None
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"{_field(path)} must be at least {schema['minLength']} characters long"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{_field(path)} must be at most {schema['maxLength']} characters long"
    return None


def _check_range(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not _is_type(value, "number"):
        return None
    if "minimum" in schema and value < schema["minimum"]:
        return f"{_field(path)} must be >= {schema['minimum']}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{_field(path)} must be <= {schema['maximum']}"
    return None


def _check_object(value: Any, schema: dict[str, Any], path: str) -> str | None:
    if not isinstance(value, dict):
        return None
    properties: dict[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{_field(_join(path, name))} is required"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            problem = validate(item, properties[name], _join(path, name))
        elif extra is False:
            problem = f"{_field(_join(path, name))} is not allowed"
        elif isinstance(extra, dict):
            problem = validate(item, extra, _join(path, name))
        else:
            problem = None
        if problem:
            return problem
    return None


def _check_array(value: Any, schema: dict[str, Any], path: str) -> str | None:
    items = schema.get("items")
    if not isinstance(value, list) or not isinstance(items, dict):
        return None
    for index, item in enumerate(value):
        problem = validate(item, items, f"{path}[{index}]")
        if problem:
            return problem
    return None


def check_schema(schema: Any, path: str) -> str | None:
    """Why `schema` is not a schema this validator understands, or None."""
    if not isinstance(schema, dict):
        return f"{path} must be a JSON schema object"
    kinds = schema.get("type", [])
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        if kind not in JSON_TYPES:
            return f"{path}: unknown type {kind!r}"
    if not isinstance(schema.get("required", []), list):
        return f"{path}: 'required' must be a list"
    if "enum" in schema and not isinstance(schema["enum"], list):
        return f"{path}: 'enum' must be a list"
    nested = [(f"{path}.{name}", sub) for name, sub in schema.get("properties", {}).items()]
    nested += [(f"{path}[]", schema["items"])] if "items" in schema else []
    if isinstance(schema.get("additionalProperties"), dict):
        nested.append((f"{path}.*", schema["additionalProperties"]))
    for where, sub in nested:
        problem = check_schema(sub, where)
        if problem:
            return problem
    return None


def _is_type(value: Any, kind: str) -> bool:
    if kind == "integer":
        return _is_number(value) and float(value).is_integer()
    if kind == "number":
        return _is_number(value)
    return json_type(value) == kind


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}
    names |= {dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _field(path: str) -> str:
    return f"field '{path}'" if path else "the arguments"
