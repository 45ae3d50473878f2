"""What an MCP client is shown: any stored text comes out inert and bounded."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import strategies as st

from kanban.mcp_server.render import ERROR_LIMIT, LIMITS, bounded, error_line, to_text

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
HOSTILE = st.text(alphabet=st.characters(codec="utf-8"), max_size=3_000)


@given(title=HOSTILE, result=HOSTILE, key=HOSTILE)
def test_no_raw_control_survives_in_the_text_or_in_its_parsed_values(
        title: str, result: str, key: str) -> None:
    text = to_text({"card": {"title": title, "result": result}, key: [title, {"x": result}]})
    assert not RAW_CONTROL.search(text)
    assert not RAW_CONTROL.search(json.dumps(json.loads(text), ensure_ascii=False))


def test_each_field_is_cut_to_its_limit_with_a_note() -> None:
    shown = bounded({"title": "\u202e" * 10_000, "result": "r" * 100_000, "other": "o" * 10_000,
                     "nested": [{"body": "b" * 50_000}]})
    assert len(shown["title"]) <= LIMITS["title"] and "characters cut" in shown["title"]
    assert len(shown["result"]) <= LIMITS["result"]
    assert len(shown["other"]) <= 2_000
    assert len(shown["nested"][0]["body"]) <= LIMITS["body"]
    assert bounded({"title": "short", "n": 3, "none": None}) == {"title": "short", "n": 3,
                                                                 "none": None}


def test_controls_are_spelled_out_not_dropped() -> None:
    assert bounded("a\x1b[2Jb\u202ec") == "a\\x1b[2Jb\\u202ec"


def test_an_error_is_one_short_escaped_line() -> None:
    line = error_line("bad \x1b]0;pwned\x07\n" + "x" * 10_000)
    assert "\n" not in line and len(line) <= ERROR_LIMIT
    assert line.startswith("bad \\x1b]0;pwned\\x07")
