"""The forkserver's warm-up runs every adapter through its SDK on a canned answer: if an
SDK update stops one from parsing, the warm-up (and this test) says so instead of leaving
every worker to pay the first use."""

from __future__ import annotations

from kanban.agent.warm import warm_up


def test_every_adapter_warms_on_its_canned_answer() -> None:
    assert warm_up(["anthropic", "openai", "openai-responses", "scripted"]) == [
        "anthropic", "openai", "openai-responses"]


def test_nothing_to_warm_for_other_models() -> None:
    assert warm_up(["scripted", "unknown"]) == []
