"""--on-dependency-failure on `add`, `edit` and `boards create|set`, and what `show` says."""

from __future__ import annotations

from kanban.service import Kanban
from tests.unit.cli.conftest import Cli


def test_add_and_edit_set_the_cards_policy_and_show_says_it(cli: Cli, kanban: Kanban) -> None:
    dep = cli.add("dependency")
    card = cli.json("add", "waits", "--depends-on", str(dep), "--on-dependency-failure",
                    "cancel")
    assert card["on_dependency_failure"] == "cancel"
    detail = cli.json("show", str(card["id"]))
    assert detail["on_dependency_failure"] == "cancel"
    assert detail["card"]["on_dependency_failure"] == "cancel"
    text = cli.ok("show", str(card["id"])).stdout
    assert "if a dependency fails or is cancelled: cancel (this card's setting)" in text
    assert f"stays cancelled if it is retried (`kanban retry {card['id']}`" in text
    edited = cli.json("edit", str(card["id"]), "--on-dependency-failure", "block")
    assert edited["changed"] == ["on_dependency_failure"]
    assert "block (this card's setting)" in cli.ok("show", str(card["id"])).stdout
    back = cli.json("edit", str(card["id"]), "--on-dependency-failure", "board")
    assert back["changed"] == ["on_dependency_failure"]
    assert back["card"]["on_dependency_failure"] is None
    assert "block (the board's default)" in cli.ok("show", str(card["id"])).stdout
    cli.ok("boards", "set", "--on-dependency-failure", "cancel")  # it follows the board now
    assert "cancel (the board's default)" in cli.ok("show", str(card["id"])).stdout


def test_show_names_the_boards_default_for_a_card_without_its_own(cli: Cli) -> None:
    dep = cli.add("dependency")
    card = cli.add("waits", "--depends-on", str(dep))
    assert "block (the board's default)" in cli.ok("show", str(card)).stdout
    alone = cli.add("no dependencies")
    assert "if a dependency fails" not in cli.ok("show", str(alone)).stdout


def test_boards_set_and_create_keep_the_boards_default(cli: Cli) -> None:
    assert cli.ok("boards", "set", "--on-dependency-failure", "cancel").stdout == (
        "board 'default': on dependency failure now cancel\n")
    assert "already cancel" in cli.ok("boards", "set", "default",
                                      "--on-dependency-failure", "cancel").stdout
    cli.ok("boards", "create", "lenient", "--on-dependency-failure", "block")
    boards = {b["name"]: b for b in cli.json("boards", "list")["boards"]}
    assert boards["default"]["on_dependency_failure"] == "cancel"
    assert boards["lenient"]["on_dependency_failure"] == "block"
    listing = cli.ok("boards", "list").stdout
    assert "default  0 cards  (on dependency failure: cancel)" in listing
    assert "lenient  0 cards\n" in listing
    dep = cli.add("dependency")
    card = cli.add("waits", "--depends-on", str(dep))
    assert "cancel (the board's default)" in cli.ok("show", str(card)).stdout
    cli.ok("cancel", str(dep))
    assert cli.json("show", str(card))["card"]["status"] == "cancelled"


def test_bad_values_are_one_line_and_change_nothing(cli: Cli) -> None:
    cli.add("a")
    for args in (("add", "b", "--on-dependency-failure", "drop"),
                 ("edit", "1", "--on-dependency-failure", "drop"),
                 ("boards", "set", "--on-dependency-failure", "drop"),
                 ("boards", "create", "x", "--on-dependency-failure", "drop")):
        assert "'drop' is not one of 'block', 'cancel'" in cli.fails(*args, code=2)
    assert "nothing to change" in cli.fails("boards", "set", code=2)
    assert "no board named 'nosuch'" in cli.fails("boards", "set", "nosuch",
                                            "--on-dependency-failure", "cancel")


def test_add_after_a_cancelled_card_says_it_is_blocked(cli: Cli) -> None:
    dep = cli.add("dependency")
    cli.ok("cancel", str(dep))
    result = cli.ok("add", "late", "--depends-on", str(dep))
    assert result.stdout == "#2\n"
    assert result.stderr == f"#2 is blocked: dependency #{dep} is cancelled\n"
