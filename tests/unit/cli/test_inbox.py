"""`kanban inbox`: every card waiting on a person, with the command that answers it."""

from __future__ import annotations

import shlex

from kanban import approvals, claims
from kanban.cards import NewCard
from kanban.service import Kanban
from kanban.transitions import Actor
from tests.unit.cli.conftest import Cli

COMMAND = "git push --force origin main"


def waiting_on_approval(kb: Kanban, title: str, command: str = COMMAND) -> int:
    card = kb.add_card(NewCard(title))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
        approvals.request(conn, card.id, command, "git push --force", run_id=claim.run_id,
                          actor=Actor("w", claim.claim_token), now=kb.clock())
    return card.id


def in_review(kb: Kanban, title: str) -> int:
    card = kb.add_card(NewCard(title, review="human"))
    with kb.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kb.clock(), lease_s=30)
    kb.complete(card.id, "draft", actor=Actor("w", claim.claim_token), gated=True)
    return card.id


def blocked(kb: Kanban, title: str) -> int:
    card = kb.add_card(NewCard(title))
    kb.block(card.id, "needs the API key\nfrom the vault")
    return card.id


def answers(text: str) -> dict[int, list[str]]:
    """Each listed card's answer commands, as printed."""
    found: dict[int, list[str]] = {}
    current = 0
    for line in text.splitlines():
        if line.startswith("#"):
            current = int(line.split()[0][1:])
        elif line.strip().startswith("answer: "):
            found.setdefault(current, []).append(line.strip().removeprefix("answer: "))
    return found


def run_answer(cli: Cli, printed: str) -> None:
    args = shlex.split(printed.replace('"..."', '"a person decided"'))
    assert args[0] == "kanban"
    cli.ok(*args[1:])


def test_inbox_lists_an_approval_a_review_and_a_block_oldest_first(cli: Cli,
                                                                   kanban: Kanban) -> None:
    asking = waiting_on_approval(kanban, "deploy")
    review = in_review(kanban, "draft the post")
    stuck = blocked(kanban, "call the API")
    kanban.add_card(NewCard("nothing to decide"))
    shown = cli.json("inbox")
    assert [(i["card_id"], i["kind"]) for i in shown["items"]] == [
        (asking, "approval"), (review, "review"), (stuck, "blocked")]
    first = shown["items"][0]
    assert first["commands"][0]["command"] == COMMAND
    assert first["commands"][0]["rule"] == "git push --force"
    assert first["answers"] == [f"kanban approve {asking}", f'kanban deny {asking} --reason "..."']
    assert shown["items"][1]["answers"][1] == f'kanban reject {review} --feedback "..."'
    assert shown["items"][2]["reason"] == "needs the API key\nfrom the vault"
    text = cli.ok("inbox").stdout
    assert f"command: {COMMAND}  (rule: git push --force)" in text
    assert "needs the API key from the vault" in text
    printed = answers(text)
    assert set(printed) == {asking, review, stuck}
    run_answer(cli, printed[asking][0])  # approve
    run_answer(cli, printed[review][1])  # reject with feedback
    run_answer(cli, printed[stuck][0])  # unblock with a note
    assert cli.json("inbox")["items"] == []
    assert "nothing waits on a person" in cli.ok("inbox").stderr


def test_a_review_with_a_reviewer_at_work_waits_on_it_not_on_a_person(cli: Cli,
                                                                      kanban: Kanban) -> None:
    card = kanban.add_card(NewCard("gated", review="reviewer:default"))
    with kanban.db.write() as conn:
        claim = claims.claim_card(conn, card.id, now=kanban.clock(), lease_s=30)
    kanban.complete(card.id, "draft", actor=Actor("w", claim.claim_token), gated=True)
    assert cli.json("inbox")["items"] == []
    reviewer = next(c for c in kanban.list_cards() if c.role == "reviewer")
    kanban.cancel(reviewer.id)
    [item] = cli.json("inbox")["items"]
    assert (item["card_id"], item["kind"]) == (card.id, "review")


def test_inbox_takes_a_board_and_hostile_text_cannot_drive_the_terminal(cli: Cli,
                                                                        kanban: Kanban) -> None:
    kanban.create_board("ops")
    card = kanban.add_card(NewCard("on ops", board="ops"))
    kanban.block(card.id, "a reason")
    asking = waiting_on_approval(kanban, "on default")
    with kanban.db.write() as conn:  # as stored by an older version, or a model's output
        conn.run("UPDATE card SET error = :e WHERE id = :id",
                 {"e": "\x1b]52;c;evil\x07 reason", "id": card.id})
        conn.run("UPDATE approval SET command = :c WHERE card_id = :id",
                 {"c": "rm -rf \x1b[2J /tmp/x", "id": asking})
    assert [i["card_id"] for i in cli.json("inbox", "--board", "ops")["items"]] == [card.id]
    text = cli.ok("inbox").stdout
    assert "\x1b" not in text and "\\x1b" in text
    assert cli.fails("inbox", "--board", "nope").startswith("no board named 'nope'")


def test_triage_nobody_is_splitting_waits_on_a_person(cli: Cli, kanban: Kanban) -> None:
    card = kanban.add_card(NewCard("rough idea"))
    kanban.triage(card.id, decomposer="default", catalog="")
    assert cli.json("inbox")["items"] == []  # its decomposer card is on it
    decomposer = next(c for c in kanban.list_cards() if c.role == "decomposer")
    kanban.cancel(decomposer.id)
    [item] = cli.json("inbox")["items"]
    assert (item["card_id"], item["kind"]) == (card.id, "triage")
    assert item["answers"] == [f"kanban triage {card.id}", f"kanban cancel {card.id}"]
    run_answer(cli, item["answers"][1])
    assert cli.json("inbox")["items"] == []
