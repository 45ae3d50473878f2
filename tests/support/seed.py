"""Big boards for plan and scale tests: finished cards with a run, an event and a message
each, inserted in bulk by the database itself (a row source, no Python loop)."""

from __future__ import annotations

from datetime import datetime

from kanban.state.store import Database

# `n(i)` for i in 1..:count, on each store
_NUMBERS = {
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count) ",
    "postgresql": "",
}
_FROM_NUMBERS = {"sqlite": "FROM n", "postgresql": "FROM generate_series(1, :count) AS n(i)"}


def seed_finished(db: Database, count: int, *, board: str, at: datetime) -> None:
    """`count` done cards on `board` (ids after the existing ones), each with one finished
    run, one `completed` event and one transcript message."""
    head, source = _NUMBERS[db.dialect], _FROM_NUMBERS[db.dialect]
    with db.write() as conn:
        if db.dialect == "postgresql":
            # A row trigger keeps card_count; 100k updates of one counter row in one
            # transaction is slow there, so the counts (and the cards' documents) are set
            # once at the end instead.
            conn.execute("SET LOCAL session_replication_role = replica")
        first = int(conn.scalar("SELECT coalesce(max(id), 0) FROM card")) + 1
        params = {"count": count, "board": board, "at": at, "first": first}
        conn.execute(
            head + "INSERT INTO card (id, board, title, goal, context, status, priority, "
            "profile, depth, created_by, attempt, max_attempts, retry_base, run_after, "
            "input_tokens, output_tokens, cached_tokens, cost, created_at, updated_at, "
            "started_at, finished_at, result) "
            "SELECT :first + i - 1, :board, 'seeded card', 'a goal', '', 'done', i % 5, "
            "'default', 0, 'user', 1, 3, 0, :at, 0, 0, 0, 0, :at, :at, :at, :at, 'done' "
            + source, params)
        conn.execute(
            "INSERT INTO run (card_id, attempt, claim_token, started_at, heartbeat_at, "
            "finished_at, outcome, input_tokens, output_tokens, cached_tokens, cost) "
            "SELECT id, 1, 'seeded', :at, :at, :at, 'completed', 0, 0, 0, 0 FROM card "
            "WHERE id >= :first", params)
        conn.execute(
            "INSERT INTO event (board, card_id, run_id, kind, actor, data, at) "
            "SELECT :board, card_id, id, 'completed', 'seed', '{}', :at FROM run "
            "WHERE card_id >= :first", params)
        conn.execute(
            "INSERT INTO message (run_id, seq, role, content, at) "
            "SELECT id, 1, 'assistant', 'done', :at FROM run WHERE card_id >= :first", params)
        if db.dialect == "postgresql":  # what the triggers would have written
            conn.execute("INSERT INTO card_search (card_id, fields, result) SELECT id, "
                         "card_search_fields(title, goal, context), card_search_result(result) "
                         "FROM card WHERE id >= :first", params)
            conn.execute("DELETE FROM card_count WHERE board = :board", params)
            conn.execute("INSERT INTO card_count (board, profile, status, n) SELECT board, "
                         "profile, status, count(*) FROM card WHERE board = :board AND "
                         "archived_at IS NULL GROUP BY board, profile, status", params)
            for table in ("card", "run"):
                conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                             f"(SELECT max(id) FROM {table}))")
    if db.dialect == "postgresql":
        with db.statement() as conn:
            conn.execute("ANALYZE")
