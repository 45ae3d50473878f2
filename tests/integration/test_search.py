"""`kanban search` on both stores: sources, filters, ranking, and FTS against a LIKE scan."""

from __future__ import annotations

import json
import random

import pytest

from kanban import claims
from kanban.cards import NewCard
from kanban.errors import ValidationError
from kanban.search import parse_query
from kanban.service import Kanban
from kanban.state.store import Database
from tests.support.db import STORES, claim_one

pytestmark = pytest.mark.parametrize("store", STORES, indirect=True)


def ids(hits: list) -> list[int]:
    return [h.card_id for h in hits]


def transcript(kb: Kanban, card_id: int, *messages: dict) -> None:
    claim = claim_one(kb, card_id)
    with kb.db.write() as conn:
        for seq, message in enumerate(messages, start=1):
            claims.append_message(conn, claim.run_id, seq, message, now=kb.clock())


def test_a_word_only_in_a_transcript_is_found(kb: Kanban) -> None:
    quiet = kb.add_card(NewCard("plain title", goal="nothing to see"))
    kb.add_card(NewCard("another card"))
    transcript(kb, quiet.id, {"role": "user", "content": "start"},
               {"role": "assistant", "content": "I found the flamingo in the logs"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "name": "write_file",
                    "arguments": json.dumps({"path": "notes.md", "content": "pelican"})}]})
    (hit,) = kb.search("flamingo")
    assert (hit.card_id, hit.source, hit.field) == (quiet.id, "transcript", "assistant")
    assert "**flamingo**" in hit.to_json()["snippet"]
    assert ids(kb.search("pelican")) == [quiet.id]  # tool-call arguments count too


def test_every_source_is_searched(kb: Kanban) -> None:
    by_title = kb.add_card(NewCard("Tune the walrus"))
    by_goal = kb.add_card(NewCard("x", goal="feed the walrus"))
    by_context = kb.add_card(NewCard("y", context="a walrus lives here"))
    by_result = kb.add_card(NewCard("z"))
    kb.complete(by_result.id, "the walrus is fed")
    by_comment = kb.add_card(NewCard("w"))
    kb.comment(by_comment.id, "ask the walrus keeper")
    hits = {h.card_id: h for h in kb.search("walrus")}
    assert set(hits) == {by_title.id, by_goal.id, by_context.id, by_result.id, by_comment.id}
    assert {h.card_id: h.field for h in hits.values()} == {
        by_title.id: "title", by_goal.id: "goal", by_context.id: "context",
        by_result.id: "result", by_comment.id: "comment"}
    assert kb.search("walrus")[0].card_id == by_title.id  # the title weighs most


def test_filters_by_board_status_and_archive(kb: Kanban) -> None:
    kb.create_board("ops")
    here = kb.add_card(NewCard("otter one"))
    there = kb.add_card(NewCard("otter two", board="ops"))
    done = kb.add_card(NewCard("otter three"))
    kb.complete(done.id, "ok")
    assert set(ids(kb.search("otter"))) == {here.id, there.id, done.id}
    assert ids(kb.search("otter", board="ops")) == [there.id]
    assert set(ids(kb.search("otter", statuses=["done", "ready"]))) == {here.id, there.id,
                                                                        done.id}
    assert ids(kb.search("otter", statuses=["done"])) == [done.id]
    kb.archive(done.id)
    assert done.id not in ids(kb.search("otter"))
    assert ids(kb.search("otter", include_archived=True, statuses=["done"])) == [done.id]
    assert kb.search("otter", statuses=["done"], include_archived=True)[0].archived


def test_words_phrases_and_prefixes(kb: Kanban) -> None:
    a = kb.add_card(NewCard("blue whale song"))
    b = kb.add_card(NewCard("whale of a blue time"))
    assert set(ids(kb.search("whale blue"))) == {a.id, b.id}  # every word, any order
    assert ids(kb.search('"blue whale"')) == [a.id]
    assert set(ids(kb.search("wha*"))) == {a.id, b.id}
    assert ids(kb.search("wha")) == []  # no prefix without the star
    assert ids(kb.search("WHALE SONG")) == [a.id]  # case folds
    assert ids(kb.search("and OR not near")) == []  # query operators are plain words


def test_queries_that_cannot_search_are_refused(kb: Kanban) -> None:
    for bad in ("", "   ", '""', "*** !!!"):
        with pytest.raises(ValidationError, match="at least one word"):
            kb.search(bad)
    with pytest.raises(ValidationError, match="limit"):
        kb.search("x", limit=0)


def test_the_parser_quotes_what_it_passes_on(store: str) -> None:
    terms = parse_query('deploy "blue whale" pars* it\'s')
    assert [(t.words, t.prefix) for t in terms] == [
        (("deploy",), False), (("blue", "whale"), False), (("pars",), True), (("it", "s"), False)]


# The same answers as a plain scan, through random edits, updates and deletes.

VOCAB = ["amber", "basil", "cobalt", "dingo", "ember", "fjord", "gecko", "harbor", "igloo",
         "jasper", "kayak", "lemur"]
assert not any(a != b and a in b for a in VOCAB for b in VOCAB)  # LIKE cannot mismatch


def _text(rng: random.Random, n: int) -> str:
    return rng.choice(["", "."]).join(f"{rng.choice(VOCAB)}{rng.choice([' ', ', ', '-'])}"
                                      for _ in range(n)).strip()


def _like_scan(db: Database, word: str) -> set[int]:
    pattern = f"%{word}%"
    with db.read() as conn:
        return set(conn.column(
            "SELECT id FROM card WHERE lower(title) LIKE :p OR lower(goal) LIKE :p "
            "OR lower(context) LIKE :p OR lower(coalesce(result, '')) LIKE :p "
            "UNION SELECT card_id FROM comment WHERE lower(body) LIKE :p "
            "UNION SELECT r.card_id FROM message m JOIN run r ON r.id = m.run_id "
            "WHERE lower(coalesce(m.content, '')) LIKE :p", {"p": pattern}))


def _random_edit(kb: Kanban, db: Database, rng: random.Random, cards: list[int]) -> None:
    op = rng.randrange(-2, 8)  # -2..0: add a card
    if op <= 0 or not cards:
        cards.append(kb.add_card(NewCard(_text(rng, 3), goal=_text(rng, 6),
                                         context=_text(rng, 2))).id)
        return
    card_id = rng.choice(cards)
    with db.write() as conn:
        if op == 1:
            conn.execute("UPDATE card SET title = :t WHERE id = :id",
                         {"t": _text(rng, 3) or "x", "id": card_id})
        elif op == 2:
            conn.execute("UPDATE card SET goal = :g, result = :r WHERE id = :id",
                         {"g": _text(rng, 5), "r": rng.choice([None, _text(rng, 4)]),
                          "id": card_id})
        elif op == 3:
            conn.execute("INSERT INTO comment (card_id, author, body, at) "
                         "VALUES (:id, 'user', :b, :at)",
                         {"id": card_id, "b": _text(rng, 4), "at": kb.clock()})
        elif op == 4:
            conn.execute("UPDATE comment SET body = :b WHERE id = (SELECT min(id) FROM comment "
                         "WHERE card_id = :id)", {"b": _text(rng, 3), "id": card_id})
        elif op == 5:
            conn.execute("DELETE FROM comment WHERE id = (SELECT max(id) FROM comment "
                         "WHERE card_id = :id)", {"id": card_id})
        elif op == 6:
            run = conn.scalar("INSERT INTO run (card_id, attempt, claim_token, started_at, "
                              "input_tokens, output_tokens, cached_tokens) VALUES "
                              "(:id, 1, 't', :at, 0, 0, 0) RETURNING id",
                              {"id": card_id, "at": kb.clock()})
            conn.execute("INSERT INTO message (run_id, seq, role, content, at) "
                         "VALUES (:run, 1, 'assistant', :c, :at)",
                         {"run": run, "c": _text(rng, 5), "at": kb.clock()})
        else:  # delete the card and everything that hangs off it
            for sql in ("DELETE FROM message WHERE run_id IN (SELECT id FROM run "
                        "WHERE card_id = :id)", "DELETE FROM run WHERE card_id = :id",
                        "DELETE FROM comment WHERE card_id = :id",
                        "DELETE FROM event WHERE card_id = :id",
                        "DELETE FROM card WHERE id = :id"):
                conn.execute(sql, {"id": card_id})
            cards.remove(card_id)


def _check_index_matches_content(db: Database) -> None:
    """SQLite: FTS5 compares each index with its content table (stale rows included)."""
    if db.dialect != "sqlite":
        return
    with db.write() as conn:
        for table in ("card_fts", "comment_fts", "message_fts"):
            conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('integrity-check', 1)")


def test_search_agrees_with_a_like_scan_over_random_edits(kb: Kanban, db: Database) -> None:
    rng = random.Random(1723)
    cards: list[int] = []
    for step in range(240):
        _random_edit(kb, db, rng, cards)
        if step % 40 == 39:
            for word in VOCAB:
                assert set(ids(kb.search(word, limit=200))) == _like_scan(db, word), word
            _check_index_matches_content(db)
    assert len(cards) > 20


def test_common_words_rank_the_newest_matches_that_pass_the_filters(
        kb: Kanban, monkeypatch: pytest.MonkeyPatch) -> None:
    from kanban import search

    monkeypatch.setattr(search, "WINDOW", 3)
    cards = [kb.add_card(NewCard(f"heron {n}")).id for n in range(6)]
    kb.complete(cards[0], "the oldest is done")
    assert sorted(ids(kb.search("heron"))) == cards[3:]
    assert ids(kb.search("heron", statuses=["done"])) == [cards[0]]  # filtered before the cut
