"""How skills are used, and what a person or the curator decided about them (migration 16)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kanban.errors import ValidationError
from kanban.state.rows import as_time
from kanban.state.store import Conn

KINDS = ("view", "given", "write", "patch", "restore")  # restore: a person brought it back
STATES = ("active", "stale", "archived")
_COUNTED = {"view": "views", "given": "given", "write": "writes", "patch": "patches"}


@dataclass(frozen=True)
class SkillUsage:
    """One skill's record: counts by kind, the last activity, pin and state."""

    name: str
    views: int = 0
    given: int = 0
    writes: int = 0
    patches: int = 0
    last_used: datetime | None = None  # the newest use of any kind
    pinned: bool = False
    state: str = "active"

    @property
    def uses(self) -> int:
        return self.views + self.given

    def shown_state(self) -> str:
        return "pinned" if self.pinned and self.state != "archived" else self.state

    def to_json(self) -> dict[str, object]:
        return {"uses": self.uses, "views": self.views, "given": self.given,
                "patches": self.patches, "writes": self.writes,
                "last_used": self.last_used.isoformat() if self.last_used else None,
                "pinned": self.pinned, "state": self.shown_state()}


def record(conn: Conn, names: Iterable[str], kind: str, *, now: datetime,
           card_id: int | None = None, profile: str | None = None) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown skill use {kind!r}")
    conn.many("INSERT INTO skill_use (skill, kind, card_id, profile, at) "
              "VALUES (:skill, :kind, :card, :profile, :at)",
              [{"skill": name, "kind": kind, "card": card_id, "profile": profile, "at": now}
               for name in dict.fromkeys(names)])


def written_by_card(conn: Conn, card_id: int) -> int:
    """How many skills the card has written (all its attempts)."""
    return int(conn.scalar("SELECT count(*) FROM skill_use WHERE kind = 'write' AND "
                           "card_id = :card", {"card": card_id}))


def named_by_board(conn: Conn) -> set[str]:
    """Skills an unfinished card or an enabled cron job names: they will be given soon."""
    names: set[str] = set()
    for (listed,) in conn.all(
            "SELECT skills FROM card WHERE skills IS NOT NULL AND status NOT IN "
            "('done', 'failed', 'cancelled') UNION SELECT skills FROM cron_job WHERE "
            "skills IS NOT NULL AND enabled"):
        names.update(n.strip() for n in str(listed).split(",") if n.strip())
    return names


def usage(conn: Conn) -> dict[str, SkillUsage]:
    """Every skill with a recorded use or decision, by name."""
    counts: dict[str, dict[str, object]] = {}
    for name, kind, count, last in conn.all(
            "SELECT skill, kind, count(*), max(at) FROM skill_use GROUP BY skill, kind"):
        entry = counts.setdefault(name, {"name": name})
        counted = _COUNTED.get(kind)
        if counted:
            entry[counted] = int(count)
        at = as_time(last)
        previous = entry.get("last_used")
        if at is not None and (not isinstance(previous, datetime) or at > previous):
            entry["last_used"] = at
    for name, pinned, state in conn.all("SELECT name, pinned, state FROM skill_state"):
        entry = counts.setdefault(name, {"name": name})
        entry.update(pinned=bool(pinned), state=state)
    return {name: SkillUsage(**entry) for name, entry in counts.items()}  # type: ignore[arg-type]


def of(conn: Conn, name: str) -> SkillUsage:
    row = conn.one("SELECT pinned, state FROM skill_state WHERE name = :name", {"name": name})
    last = conn.scalar("SELECT max(at) FROM skill_use WHERE skill = :name", {"name": name})
    pinned, state = (bool(row[0]), row[1]) if row else (False, "active")
    return SkillUsage(name, last_used=as_time(last), pinned=pinned, state=state)


def set_state(conn: Conn, name: str, *, now: datetime, pinned: bool | None = None,
              state: str | None = None) -> None:
    """Pin, unpin or move a skill; the other of the two is kept."""
    if state is not None and state not in STATES:
        raise ValidationError(f"unknown skill state {state!r}")
    current = of(conn, name)
    conn.execute(
        "INSERT INTO skill_state (name, pinned, state, changed_at) "
        "VALUES (:name, :pinned, :state, :now) ON CONFLICT (name) DO UPDATE SET "
        "pinned = excluded.pinned, state = excluded.state, changed_at = excluded.changed_at",
        {"name": name, "now": now,
         "pinned": current.pinned if pinned is None else pinned,
         "state": current.state if state is None else state})
