"""`kanban search` from the command line."""

from __future__ import annotations

from kanban.cards import NewCard
from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


def test_search_text_and_json(cli: Cli, kanban: Kanban) -> None:
    kanban.create_board("ops")
    kanban.add_card(NewCard("Write the parser", goal="recursive descent"))
    deploy = kanban.add_card(NewCard("Deploy", board="ops"))
    kanban.comment(deploy.id, "the parser goes first")
    text = cli.ok("search", "parser").stdout
    assert "#1 ready Write the parser" in text and "title: Write the **parser**" in text
    assert "[ops]" in text and "comment: the **parser** goes first" in text
    data = cli.json("search", "parser", "--board", "ops")
    assert data["query"] == "parser"
    assert [(h["card_id"], h["field"], h["snippet"]) for h in data["hits"]] == [
        (deploy.id, "comment", "the **parser** goes first")]
    assert cli.json("search", "parser", "--status", "done")["hits"] == []
    assert cli.ok("search", "nothing-like-it").stdout == "no matches\n"


def test_bad_searches_fail_cleanly(cli: Cli) -> None:
    assert "at least one word" in cli.fails("search", "!!!")
    assert "no board named 'nope'" in cli.fails("search", "x", "--board", "nope")
    cli.fails("search", "x", "--limit", "0", code=2)
