"""The JSON-Schema subset validator tools use for their arguments."""

from __future__ import annotations

from typing import Any

import pytest

from kanban.tools import validate

CARD = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 10},
        "priority": {"type": "integer", "minimum": 0, "maximum": 3},
        "weight": {"type": "number"},
        "urgent": {"type": "boolean"},
        "state": {"enum": ["todo", "done"]},
        "parent": {"type": ["integer", "null"]},
        "tags": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"id": {"type": "integer"}},
                "required": ["id"],
            },
        },
        "meta": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["title"],
}


@pytest.mark.parametrize(
    "value",
    [
        {"title": "ok"},
        {"title": "ok", "priority": 3, "weight": 1.5, "urgent": False, "state": "done"},
        {"title": "ok", "priority": 2.0},  # 2.0 is an integer in JSON Schema
        {"title": "ok", "parent": None, "tags": ["a"], "links": [{"id": 1}]},
        {"title": "ok", "meta": {"k": "v"}, "unknown": "allowed by default"},
    ],
)
def test_valid_values_pass(value: dict[str, Any]) -> None:
    assert validate(value, CARD) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({}, "field 'title' is required"),
        ({"title": 5}, "field 'title' must be of type string, got integer"),
        ({"title": "x" * 11}, "field 'title' must be at most 10 characters long"),
        ({"title": "t", "priority": True}, "field 'priority' must be of type integer, got boolean"),
        ({"title": "t", "priority": 1.5}, "field 'priority' must be of type integer, got number"),
        ({"title": "t", "priority": -1}, "field 'priority' must be >= 0"),
        ({"title": "t", "priority": 4}, "field 'priority' must be <= 3"),
        ({"title": "t", "weight": "1"}, "field 'weight' must be of type number, got string"),
        ({"title": "t", "urgent": 1}, "field 'urgent' must be of type boolean, got integer"),
        ({"title": "t", "state": "doing"}, 'field \'state\' must be one of: "todo", "done"'),
        ({"title": "t", "parent": "p"}, "must be of type integer or null, got string"),
        ({"title": "t", "tags": "a"}, "field 'tags' must be of type array, got string"),
        ({"title": "t", "tags": ["a", ""]}, "field 'tags[1]' must be at least 1 characters"),
        ({"title": "t", "links": [{}]}, "field 'links[0].id' is required"),
        ({"title": "t", "meta": {"k": 1}}, "field 'meta.k' must be of type string"),
    ],
)
def test_invalid_values_name_the_field(value: dict[str, Any], problem: str) -> None:
    assert problem in (validate(value, CARD) or "")


def test_top_level_type_mismatch() -> None:
    assert validate([], {"type": "object"}) == "the arguments must be of type object, got array"
