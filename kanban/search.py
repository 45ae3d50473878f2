"""Full-text search over cards: titles, goals, context, results, comments and transcripts.

SQLite answers from FTS5 tables that triggers keep current in the writing transaction;
PostgreSQL from GIN indexes over `to_tsvector('simple', ...)` (migration 5; a card's own in
card_search since migration 23, written only when its text changes). Both take the
same query language: words (all must match; a card's own fields, one comment or one
message must hold them all), `"a phrase"`, and `prefix*`. One hit per card, best first,
with a snippet of where it matched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kanban.cards import require_board
from kanban.errors import ValidationError
from kanban.state.store import Conn
from kanban.states import CardStatus

MAX_LIMIT = 200
WINDOW = 2000  # matches ranked per source (the newest that pass the filters)
MAX_TERMS = 32
START, STOP = "\ue000", "\ue001"  # private-use characters around each match in a snippet
CARD_FIELDS = ("title", "goal", "context", "result")
_TOKEN = re.compile(r'"([^"]*)"|([^\s"]+)')
_WORD = re.compile(r"\w+")

# The same expressions as the GIN indexes (the planner matches them). A card's document
# is card_search's `fields || result` (migration 23): A (title) > B (goal) > C (result) >
# D (context) in ts_rank.
_COMMENT_TSV = "to_tsvector('simple'::regconfig, cm.body)"
_MESSAGE_TSV = ("to_tsvector('simple'::regconfig, coalesce(m.content, '') || ' ' || "
                "coalesce(m.tool_calls, ''))")
_MESSAGE_TEXT = "coalesce(content, '') || ' ' || coalesce(tool_calls, '')"


@dataclass(frozen=True)
class Term:
    """Words that must appear in this order (one word, or a quoted phrase)."""

    words: tuple[str, ...]
    prefix: bool = False


@dataclass(frozen=True)
class SearchHit:
    card_id: int
    board: str
    title: str
    status: str
    archived: bool
    source: str  # card | comment | transcript
    field: str  # title, goal, context, result, comment, or the message's role
    snippet: str  # matches between START and STOP
    score: float  # higher is better
    matches: int  # how many rows of this card matched

    def marked(self, before: str = "**", after: str = "**") -> str:
        return self.snippet.replace(START, before).replace(STOP, after)

    def to_json(self) -> dict[str, Any]:
        return {"card_id": self.card_id, "board": self.board, "title": self.title,
                "status": self.status, "archived": self.archived, "source": self.source,
                "field": self.field, "snippet": self.marked(), "score": round(self.score, 6),
                "matches": self.matches}


def parse_query(text: str) -> list[Term]:
    """Words, "quoted phrases" and prefix* terms; punctuation separates words."""
    terms = []
    for phrase, bare in _TOKEN.findall(text):
        words = tuple(w.lower() for w in _WORD.findall(phrase or bare))
        if words:
            terms.append(Term(words, prefix=bool(bare) and bare.endswith("*")
                              and len(words) == 1))
    if not terms:
        raise ValidationError("search for at least one word")
    if len(terms) > MAX_TERMS:
        raise ValidationError(f"a search takes at most {MAX_TERMS} terms, not {len(terms)}")
    return terms


def fts5_query(terms: Sequence[Term]) -> str:
    """The FTS5 MATCH text: every term quoted (so AND, OR, NEAR are plain words)."""
    return " ".join('"' + " ".join(t.words) + '"' + ("*" if t.prefix else "") for t in terms)


def tsquery(terms: Sequence[Term]) -> str:
    """The to_tsquery('simple', ...) text: terms joined by &, phrases by <->."""
    parts = []
    for term in terms:
        words = [f"'{w}'" for w in term.words]
        if term.prefix:
            words[-1] += ":*"
        parts.append(" <-> ".join(words))
    return " & ".join(parts)


def search(conn: Conn, text: str, *, board: str | None = None,
           statuses: Sequence[str] = (), include_archived: bool = False,
           limit: int = 20) -> list[SearchHit]:
    """The best `limit` cards for `text`, best first, each with a snippet."""
    terms = parse_query(text)
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationError(f"limit must be between 1 and {MAX_LIMIT}")
    if board is not None:
        require_board(conn, board)
    where, params = _filters(board, statuses, include_archived)
    params.update(limit=limit, window=WINDOW)
    if conn.dialect == "postgresql":
        params["q"] = tsquery(terms)
        rows = conn.all(_PG_SEARCH.format(where=where), params)
        return [_hit(row, _pg_snippet(conn, row, params["q"]), float(row[7])) for row in rows]
    params["q"] = fts5_query(terms)
    rows = conn.all(_SQLITE_SEARCH.format(where=where), params)
    # bm25 is lower-is-better: turn it round so every store's score grows with relevance
    return [_hit(row, _sqlite_snippet(conn, row, params["q"]), -float(row[7])) for row in rows]


def _filters(board: str | None, statuses: Sequence[str],
             include_archived: bool) -> tuple[str, dict[str, Any]]:
    where, params = [], {}
    if board is not None:
        where.append("c.board = :board")
        params["board"] = board
    if statuses:
        names = [str(CardStatus(s)) for s in statuses]
        where.append(f"c.status IN ({', '.join(f':s{n}' for n in range(len(names)))})")
        params.update({f"s{n}": name for n, name in enumerate(names)})
    if not include_archived:
        where.append("c.archived_at IS NULL")
    return (" AND ".join(where) or "1 = 1"), params


# Rows: card id, board, title, status, archived_at, source, ref id, score, matches.
# Each source ranks at most WINDOW matches, newest first, that pass the filters: a word in
# most of 100k cards still answers in tens of milliseconds (its oldest matches go unranked).
# bm25 is lower-is-better; a card's title counts most, then its goal and result.
_SQLITE_SEARCH = """
WITH hits(card_id, source, ref_id, score) AS (
    SELECT * FROM (
        SELECT c.id, 'card', c.id, bm25(card_fts, 10.0, 4.0, 1.0, 3.0)
        FROM card_fts JOIN card c ON c.id = card_fts.rowid
        WHERE card_fts MATCH :q AND {where} ORDER BY card_fts.rowid DESC LIMIT :window)
    UNION ALL
    SELECT * FROM (
        SELECT cm.card_id, 'comment', cm.id, bm25(comment_fts)
        FROM comment_fts JOIN comment cm ON cm.id = comment_fts.rowid
        JOIN card c ON c.id = cm.card_id
        WHERE comment_fts MATCH :q AND {where} ORDER BY comment_fts.rowid DESC LIMIT :window)
    UNION ALL
    SELECT * FROM (
        SELECT r.card_id, 'transcript', m.id, bm25(message_fts)
        FROM message_fts JOIN message m ON m.id = message_fts.rowid
        JOIN run r ON r.id = m.run_id JOIN card c ON c.id = r.card_id
        WHERE message_fts MATCH :q AND {where} ORDER BY message_fts.rowid DESC LIMIT :window)
),
best AS (  -- SQLite takes the bare columns from the row holding the min()
    SELECT card_id, source, ref_id, min(score) AS score, count(*) AS matches
    FROM hits GROUP BY card_id
)
SELECT c.id, c.board, c.title, c.status, c.archived_at, b.source, b.ref_id, b.score, b.matches
FROM best b JOIN card c ON c.id = b.card_id
ORDER BY b.score, c.id LIMIT :limit
"""

_PG_SEARCH = f"""
WITH q AS (SELECT to_tsquery('simple'::regconfig, :q) AS query),
hits AS (
    (SELECT c.id AS card_id, 'card' AS source, c.id AS ref_id,
            ts_rank(s.fields || s.result, q.query) AS score
     FROM card_search s JOIN card c ON c.id = s.card_id, q
     WHERE (s.fields || s.result) @@ q.query AND {{where}}
     ORDER BY s.card_id DESC LIMIT :window)
    UNION ALL
    (SELECT cm.card_id, 'comment', cm.id, ts_rank({_COMMENT_TSV}, q.query)
     FROM comment cm JOIN card c ON c.id = cm.card_id, q
     WHERE {_COMMENT_TSV} @@ q.query AND {{where}}
     ORDER BY cm.id DESC LIMIT :window)
    UNION ALL
    (SELECT r.card_id, 'transcript', m.id, ts_rank({_MESSAGE_TSV}, q.query)
     FROM message m JOIN run r ON r.id = m.run_id JOIN card c ON c.id = r.card_id, q
     WHERE {_MESSAGE_TSV} @@ q.query AND {{where}}
     ORDER BY m.id DESC LIMIT :window)
),
best AS (
    SELECT DISTINCT ON (card_id) card_id, source, ref_id, score,
           count(*) OVER (PARTITION BY card_id) AS matches
    FROM hits ORDER BY card_id, score DESC, source, ref_id
)
SELECT c.id, c.board, c.title, c.status, c.archived_at, b.source, b.ref_id, b.score, b.matches
FROM best b JOIN card c ON c.id = b.card_id
ORDER BY b.score DESC, c.id LIMIT :limit
"""


def _hit(row: Sequence[Any], where: tuple[str, str], score: float) -> SearchHit:
    card_id, board, title, status, archived_at, source, _, _, matches = row
    field, snippet = where
    return SearchHit(card_id, board, title, status, archived_at is not None, source, field,
                     snippet, score, int(matches))


_SNIPPET_ARGS = f"'{START}', '{STOP}', '…', 12"


def _sqlite_snippet(conn: Conn, row: Sequence[Any], q: str) -> tuple[str, str]:
    """(field, snippet) of the row that made this card a hit."""
    source, ref_id = row[5], row[6]
    if source == "comment":
        text = conn.scalar(f"SELECT snippet(comment_fts, 0, {_SNIPPET_ARGS}) FROM comment_fts "
                           "WHERE comment_fts MATCH :q AND rowid = :id", {"q": q, "id": ref_id})
        return "comment", text or ""
    if source == "transcript":
        found = conn.one(f"SELECT snippet(message_fts, -1, {_SNIPPET_ARGS}), m.role "
                         "FROM message_fts JOIN message m ON m.id = message_fts.rowid "
                         "WHERE message_fts MATCH :q AND message_fts.rowid = :id",
                         {"q": q, "id": ref_id})
        return (found[1], found[0] or "") if found else ("transcript", "")
    columns = ", ".join(f"snippet(card_fts, {i}, {_SNIPPET_ARGS})"
                        for i in range(len(CARD_FIELDS)))
    snippets = conn.one(f"SELECT {columns} FROM card_fts WHERE card_fts MATCH :q "
                        "AND rowid = :id", {"q": q, "id": ref_id}) or ()
    return _first_marked(zip(CARD_FIELDS, snippets, strict=False))


def _pg_snippet(conn: Conn, row: Sequence[Any], q: str) -> tuple[str, str]:
    source, ref_id = row[5], row[6]
    options = f"StartSel={START}, StopSel={STOP}, MaxWords=24, MinWords=8, MaxFragments=1"
    headline = "ts_headline('simple'::regconfig, {text}, to_tsquery('simple'::regconfig, :q), " \
               ":options)"
    params = {"q": q, "id": ref_id, "options": options}
    if source == "comment":
        text = conn.scalar(f"SELECT {headline.format(text='body')} FROM comment WHERE id = :id",
                           params)
        return "comment", text or ""
    if source == "transcript":
        found = conn.one(
            f"SELECT {headline.format(text=_MESSAGE_TEXT)}, role FROM message WHERE id = :id",
            params)
        return (found[1], found[0] or "") if found else ("transcript", "")
    columns = ", ".join(headline.format(text=f"coalesce({f}, '')") for f in CARD_FIELDS)
    snippets = conn.one(f"SELECT {columns} FROM card WHERE id = :id", params) or ()
    return _first_marked(zip(CARD_FIELDS, snippets, strict=False))


def _first_marked(fields: Any) -> tuple[str, str]:
    """The first field whose snippet holds a match (the title when none does)."""
    pairs = [(name, text or "") for name, text in fields]
    for name, text in pairs:
        if START in text:
            return name, text
    return pairs[0] if pairs else ("title", "")
