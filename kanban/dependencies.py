"""Dependencies between cards of one board: links, cycle refusal, promotion."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from kanban.errors import CardNotFound, DependencyError
from kanban.events import record_event, status_change
from kanban.notify import outbox
from kanban.state.store import Conn
from kanban.states import CardStatus

_LINKABLE = {CardStatus.TODO, CardStatus.READY, CardStatus.BLOCKED}


def _card_row(conn: Conn, card_id: int) -> tuple[str, str]:
    row = conn.one("SELECT board, status FROM card WHERE id = :id", {"id": card_id})
    if row is None:
        raise CardNotFound(card_id)
    return row[0], row[1]


def check_link(conn: Conn, card_id: int | None, depends_on_id: int, *, board: str) -> None:
    """Refuse a self link, a missing card, a cross-board link or a cycle."""
    if card_id is not None and card_id == depends_on_id:
        raise DependencyError(f"a card cannot depend on itself (#{card_id})")
    dep_board, _ = _card_row(conn, depends_on_id)
    if dep_board != board:
        who = f"#{card_id}" if card_id is not None else "the new card"
        raise DependencyError(
            f"cannot link {who} (board {board!r}) to #{depends_on_id} (board {dep_board!r}): "
            "dependencies stay on one board"
        )
    if card_id is not None:
        path = _path_between(conn, depends_on_id, card_id)
        if path is not None:
            cycle = " → ".join(f"#{n}" for n in [card_id, *path])
            raise DependencyError(f"linking #{card_id} to #{depends_on_id} would close a cycle: "
                                  f"{cycle}")


def _path_between(conn: Conn, start: int, goal: int) -> list[int] | None:
    """A dependency path start → … → goal, following depends_on edges (BFS)."""
    parents: dict[int, int | None] = {start: None}
    frontier = [start]
    while frontier:
        marks = ", ".join(f":f{n}" for n in range(len(frontier)))
        rows = conn.all(f"SELECT card_id, depends_on_id FROM dependency WHERE card_id IN "
                        f"({marks})", {f"f{n}": node for n, node in enumerate(frontier)})
        frontier = []
        for src, dst in rows:
            if dst in parents:
                continue
            parents[dst] = src
            if dst == goal:
                path = [dst]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return path[::-1]
            frontier.append(dst)
    return None


def link(conn: Conn, card_id: int, depends_on_id: int, *, actor: str, now: datetime,
         board: str | None = None) -> bool:
    """Make card_id depend on depends_on_id; False if the link already existed."""
    card_board, status = _card_row(conn, card_id)
    if board is not None and card_board != board:
        raise CardNotFound(card_id, board)
    if conn.dialect == "postgresql":
        # Serialise links per board, as BEGIN IMMEDIATE does on SQLite: two concurrent
        # opposite links must not both pass the cycle check.
        conn.run("SELECT name FROM board WHERE name = :board FOR UPDATE",
                   {"board": card_board})
    check_link(conn, card_id, depends_on_id, board=card_board)
    if status not in _LINKABLE:
        raise DependencyError(f"cannot add a dependency to #{card_id}: it is {status}")
    key = {"card": card_id, "dep": depends_on_id}
    if conn.one("SELECT card_id FROM dependency WHERE card_id = :card AND "
                "depends_on_id = :dep", key):
        return False
    conn.run("INSERT INTO dependency (card_id, depends_on_id) VALUES (:card, :dep)", key)
    record_event(conn, board=card_board, card_id=card_id, kind="linked", actor=actor, at=now,
                 depends_on_id=depends_on_id)
    if status == CardStatus.READY and unfinished_dependencies(conn, [depends_on_id]):
        _set_status(conn, card_id, card_board, CardStatus.READY, CardStatus.TODO, actor, now)
        status = CardStatus.TODO
    if status == CardStatus.TODO:  # not todo forever behind a card nobody will finish
        dep_status = conn.scalar("SELECT status FROM card WHERE id = :id", {"id": depends_on_id})
        if dep_status in (CardStatus.FAILED, CardStatus.CANCELLED):
            block_on(conn, card_id, depends_on_id, f"is {dep_status}", now, actor)
    return True


def unlink(conn: Conn, card_id: int, depends_on_id: int, *, actor: str,
           now: datetime) -> None:
    card_board, _ = _card_row(conn, card_id)
    if conn.run("DELETE FROM dependency WHERE card_id = :card AND depends_on_id = :dep",
                {"card": card_id, "dep": depends_on_id}) == 0:
        raise DependencyError(f"#{card_id} does not depend on #{depends_on_id}")
    record_event(conn, board=card_board, card_id=card_id, kind="unlinked", actor=actor, at=now,
                 depends_on_id=depends_on_id)
    promote_ready(conn, now, candidates=[card_id])


def unfinished_dependencies(conn: Conn, ids: Sequence[int]) -> list[int]:
    if not ids:
        return []
    ids = list(ids)
    marks = ", ".join(f":i{n}" for n in range(len(ids)))
    return sorted(conn.column(f"SELECT id FROM card WHERE id IN ({marks}) AND status != 'done'",
                              {f"i{n}": card_id for n, card_id in enumerate(ids)}))



def status_after_dependencies(conn: Conn, card_id: int) -> CardStatus:
    """Where a card returning to the queue goes: todo while a dependency is unfinished."""
    deps = conn.column("SELECT depends_on_id FROM dependency WHERE card_id = :id",
                       {"id": card_id})
    return CardStatus.TODO if unfinished_dependencies(conn, deps) else CardStatus.READY


_ALL_DONE = ("NOT EXISTS (SELECT 1 FROM dependency d JOIN card b ON b.id = d.depends_on_id "
             "WHERE d.card_id = card.id AND b.status != 'done')")
SWEEP_BATCH = 500  # cards promoted per write transaction by the safety sweep


def promotable(conn: Conn) -> list[int]:
    """Todo cards whose dependencies are all done (a read: the index on status serves it)."""
    return conn.column(f"SELECT id FROM card WHERE status = 'todo' AND {_ALL_DONE} ORDER BY id")


def promote_ready(conn: Conn, now: datetime, *, candidates: Iterable[int] | None = None,
                  actor: str = "system") -> list[int]:
    """Move todo cards whose dependencies are all done to ready; returns their ids."""
    sql = ("UPDATE card SET status = 'ready', updated_at = :now, run_after = :now "
           f"WHERE status = 'todo' AND {_ALL_DONE}")
    params: dict[str, object] = {"now": now}
    if candidates is not None:
        ids = list(candidates)
        if not ids:
            return []
        sql += f" AND id IN ({', '.join(f':i{n}' for n in range(len(ids)))})"
        params.update({f"i{n}": card_id for n, card_id in enumerate(ids)})
    promoted = conn.all(sql + " RETURNING id, board", params)
    for card_id, board in promoted:
        record_event(conn, board=board, card_id=card_id, kind="promoted", actor=actor, at=now,
                     **status_change(CardStatus.TODO, CardStatus.READY))
    return sorted(card_id for card_id, _ in promoted)


_PROMOTE_DEPENDENTS = """
UPDATE card SET status = 'ready', updated_at = :now, run_after = :now
WHERE status = 'todo'
  AND id IN (SELECT card_id FROM dependency WHERE depends_on_id = :card)
  AND NOT EXISTS (SELECT 1 FROM dependency d JOIN card b ON b.id = d.depends_on_id
                  WHERE d.card_id = card.id AND b.status != 'done')
RETURNING id, board
"""
_DEMOTE_DEPENDENTS = """
UPDATE card SET status = 'todo', updated_at = :now
WHERE status = 'ready' AND id IN (SELECT card_id FROM dependency WHERE depends_on_id = :card)
RETURNING id, board
"""


def promote_dependents(conn: Conn, done_id: int, now: datetime,
                       actor: str = "system") -> list[int]:
    """After `done_id` is done: its dependents whose dependencies are all done become ready."""
    return _move_dependents(conn, _PROMOTE_DEPENDENTS, done_id, now, actor, "promoted",
                            CardStatus.TODO, CardStatus.READY)


def demote_dependents(conn: Conn, redo_id: int, now: datetime,
                      actor: str = "system") -> list[int]:
    """A done card goes back to the queue: its ready dependents must wait for it again."""
    return _move_dependents(conn, _DEMOTE_DEPENDENTS, redo_id, now, actor, "demoted",
                            CardStatus.READY, CardStatus.TODO)


def _move_dependents(conn: Conn, sql: str, card_id: int, now: datetime, actor: str,
                     kind: str, frm: CardStatus, to: CardStatus) -> list[int]:
    moved = conn.all(sql, {"now": now, "card": card_id})
    for dependent, board in moved:
        record_event(conn, board=board, card_id=dependent, kind=kind, actor=actor, at=now,
                     **status_change(frm, to))
    return sorted(dependent for dependent, _ in moved)


def _set_status(conn: Conn, card_id: int, board: str, frm: str, to: str, actor: str,
                now: datetime) -> None:
    conn.run("UPDATE card SET status = :to, updated_at = :now WHERE id = :id",
             {"to": to, "now": now, "id": card_id})
    record_event(conn, board=board, card_id=card_id, kind="demoted", actor=actor, at=now,
                 **status_change(frm, to))


def blocked_by_reason(dependency_id: int) -> str:
    """The start of the reason a dependent is blocked with: it names the dependency."""
    return f"dependency #{dependency_id} "


# A card's own policy, else its board's (the board's column is never NULL).
_POLICY = ("COALESCE(card.on_dependency_failure, (SELECT p.on_dependency_failure FROM board p "
           "WHERE p.name = card.board))")
_WAITING_ON = ("status IN ('todo', 'ready') AND id IN (SELECT card_id FROM dependency "
               "WHERE depends_on_id = :card)")


def failure_reason(dependency_id: int, how: str) -> str:
    """Why a dependent was blocked or cancelled: it names the dependency and what befell it."""
    return f"{blocked_by_reason(dependency_id)}{how}"[:2000]


def block_dependents(conn: Conn, card_id: int, how: str, now: datetime,
                     actor: str = "system") -> list[int]:
    """`card_id` failed or was cancelled: its waiting dependents whose policy is `block`
    become blocked with a reason that names it, rather than wait for it forever."""
    reason = failure_reason(card_id, how)
    moved = conn.all("UPDATE card SET status = 'blocked', error = :reason, updated_at = :now "
                     f"WHERE {_WAITING_ON} AND {_POLICY} = 'block' RETURNING id, board, status",
                     {"reason": reason, "now": now, "card": card_id})
    for dependent, board, _ in moved:
        record_event(conn, board=board, card_id=dependent, kind="dependency_blocked",
                     actor=actor, at=now, depends_on_id=card_id, reason=reason,
                     **status_change(CardStatus.TODO, CardStatus.BLOCKED))
    if moved and outbox.subscribed(conn, moved[0][1]):  # (dependents share its board)
        for dependent, board, _ in moved:
            outbox.queue(conn, board, dependent, CardStatus.TODO, CardStatus.BLOCKED,
                         actor=actor, now=now)
    return sorted(dependent for dependent, _, _ in moved)


def dependents_to_cancel(conn: Conn, card_id: int) -> list[int]:
    """The waiting dependents of `card_id` whose policy is `cancel` (kanban.dependency_failure
    cancels them, as a person would, so that each cascades by its own dependents' policy)."""
    return conn.column(f"SELECT id FROM card WHERE {_WAITING_ON} AND {_POLICY} = 'cancel' "
                       "ORDER BY id", {"card": card_id})


def policy_of(conn: Conn, card_id: int) -> str:
    """The policy that applies to a card: its own, else its board's."""
    value = conn.scalar(f"SELECT {_POLICY} FROM card WHERE id = :id", {"id": card_id})
    if value is None:
        raise CardNotFound(card_id)
    return str(value)


def ended_dependency(conn: Conn, card_id: int) -> tuple[int, str] | None:
    """A failed or cancelled dependency of `card_id` (the lowest id) and its status, if any."""
    row = conn.one("SELECT b.id, b.status FROM dependency d JOIN card b ON b.id = "
                   "d.depends_on_id WHERE d.card_id = :id AND b.status IN ('failed', "
                   "'cancelled') ORDER BY d.depends_on_id LIMIT 1", {"id": card_id})
    return (int(row[0]), str(row[1])) if row is not None else None


def block_on(conn: Conn, card_id: int, dependency_id: int, how: str, now: datetime,
             actor: str) -> None:
    """Block one waiting card on its ended dependency (a retried or unblocked card whose
    dependency is still failed would otherwise wait in todo for it with nothing said)."""
    reason = failure_reason(dependency_id, how)
    board = conn.scalar("UPDATE card SET status = 'blocked', error = :reason, updated_at = :now "
                        "WHERE id = :id AND status IN ('todo', 'ready') RETURNING board",
                        {"reason": reason, "now": now, "id": card_id})
    if board is not None:
        record_event(conn, board=board, card_id=card_id, kind="dependency_blocked",
                     actor=actor, at=now, depends_on_id=dependency_id, reason=reason,
                     **status_change(CardStatus.TODO, CardStatus.BLOCKED))
        if outbox.subscribed(conn, board):
            outbox.queue(conn, board, card_id, CardStatus.TODO, CardStatus.BLOCKED,
                         actor=actor, now=now)


def release_dependents(conn: Conn, card_id: int, now: datetime,
                       actor: str = "system") -> list[int]:
    """`card_id` was retried: dependents it had blocked wait for it again (and go on once
    it is done)."""
    moved = conn.all("UPDATE card SET status = 'todo', error = NULL, updated_at = :now "
                     "WHERE status = 'blocked' AND error LIKE :reason AND id IN (SELECT card_id "
                     "FROM dependency WHERE depends_on_id = :card) RETURNING id, board",
                     {"now": now, "card": card_id,
                      "reason": f"{blocked_by_reason(card_id)}%"})
    for dependent, board in moved:
        record_event(conn, board=board, card_id=dependent, kind="dependency_released",
                     actor=actor, at=now, depends_on_id=card_id,
                     **status_change(CardStatus.BLOCKED, CardStatus.TODO))
    ids = sorted(dependent for dependent, _ in moved)
    promote_ready(conn, now, candidates=ids, actor=actor)
    return ids
