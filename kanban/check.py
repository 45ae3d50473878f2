"""`kanban check`: is the database file intact, and does the board keep its invariants?

SQLite's `integrity_check` runs first, on a read-only connection that needs no schema (a
corrupt file can still be examined). The invariants: no running card without its open run
and a lease, no ready card with an unfinished dependency, no todo card whose dependencies
are all done, no open run whose card is not running under its claim. `repair` applies the
safe fixes, each one transaction with events like any other change.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kanban import claims, control, transitions
from kanban.dependencies import promote_ready
from kanban.events import record_event, status_change
from kanban.state.store import Conn, Database
from kanban.states import CardStatus, Outcome
from kanban.transitions import Actor

CHECKER = Actor("check")
MAX_INTEGRITY_LINES = 100


@dataclass(frozen=True)
class Finding:
    kind: str  # running_without_run | ready_with_unfinished_dependency | todo_ready | open_run
    # | lapsed_lease
    card_id: int
    detail: str
    run_id: int | None = None  # the open run, for open_run

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "card": self.card_id, "detail": self.detail}


@dataclass
class CheckReport:
    integrity: list[str]  # ["ok"] when the file is intact
    findings: list[Finding] = field(default_factory=list)
    repaired: list[Finding] = field(default_factory=list)

    @property
    def intact(self) -> bool:
        return self.integrity == ["ok"]

    @property
    def ok(self) -> bool:
        return self.intact and not self.findings

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "integrity": self.integrity,
                "findings": [f.to_json() for f in self.findings],
                "repaired": [f.to_json() for f in self.repaired]}


def integrity(path: Path) -> list[str]:
    """`PRAGMA integrity_check` over a read-only connection: ["ok"], or what is wrong."""
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"cannot open the file: {exc}"]
    try:
        rows = conn.execute(f"PRAGMA integrity_check({MAX_INTEGRITY_LINES})").fetchall()
        problems = [str(r[0]) for r in rows]
        problems += [f"foreign key: {r[0]} row {r[1]} points to a missing {r[2]}"
                     for r in conn.execute("PRAGMA foreign_key_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [f"the file is not a readable database: {exc}"]
    finally:
        conn.close()
    problems = [p for p in problems if p != "ok"]
    return problems or ["ok"]


def find(conn: Conn, now: datetime | None = None) -> list[Finding]:
    """Every broken invariant, read in one snapshot (with `now`, also running cards whose
    lease lapsed while no live dispatcher owns them: a restored backup's, a dead one's)."""
    found = [Finding("running_without_run", card_id,
                     f"#{card_id} is running without an open run and a lease")
             for (card_id,) in conn.all(
                 "SELECT c.id FROM card c WHERE c.status = 'running' AND (c.claim_token IS NULL "
                 "OR c.lease_expires_at IS NULL OR NOT EXISTS (SELECT 1 FROM run r WHERE "
                 "r.card_id = c.id AND r.claim_token = c.claim_token AND r.finished_at IS NULL))"
                 " ORDER BY c.id")]
    found += [Finding("ready_with_unfinished_dependency", card_id,
                      f"#{card_id} is ready but depends on unfinished #{dep}")
              for card_id, dep in conn.all(
                  "SELECT c.id, min(b.id) FROM card c JOIN dependency d ON d.card_id = c.id "
                  "JOIN card b ON b.id = d.depends_on_id WHERE c.status = 'ready' "
                  "AND b.status != 'done' GROUP BY c.id ORDER BY c.id")]
    found += [Finding("todo_ready", card_id,
                      f"#{card_id} waits in todo though its dependencies are all done")
              for (card_id,) in conn.all(
                  "SELECT c.id FROM card c WHERE c.status = 'todo' AND NOT EXISTS (SELECT 1 "
                  "FROM dependency d JOIN card b ON b.id = d.depends_on_id WHERE "
                  "d.card_id = c.id AND b.status != 'done') ORDER BY c.id")]
    found += [Finding("open_run", card_id,
                      f"run {run_id} of #{card_id} is open though its card is not running "
                      "under its claim", run_id)
              for run_id, card_id in conn.all(
                  "SELECT r.id, r.card_id FROM run r JOIN card c ON c.id = r.card_id "
                  "WHERE r.finished_at IS NULL AND (c.status != 'running' OR "
                  "c.claim_token IS NULL OR c.claim_token != r.claim_token) ORDER BY r.id")]
    return found + (_abandoned(conn, now) if now is not None else [])


def _abandoned(conn: Conn, now: datetime) -> list[Finding]:
    """Running cards past their lease whose dispatcher is gone (or that a `kanban run` lead
    holds: its process renews the lease while it lives)."""
    leases = [lease for lease in claims.running_leases(conn) if lease.lease_expires_at < now]
    owners = control.dispatchers_by_id(
        conn, {lease.dispatcher_id for lease in leases if lease.dispatcher_id is not None})
    found = []
    for lease in leases:
        owner = owners.get(lease.dispatcher_id) if lease.dispatcher_id is not None else None
        if owner is None or not owner.alive(now):
            found.append(Finding("lapsed_lease", lease.card_id, f"#{lease.card_id} is running "
                                 "past its lease and no live dispatcher owns it"))
    return found


def repair(conn: Conn, finding: Finding, now: datetime) -> bool:
    """The safe fix for one finding (still broken when re-read); True if applied."""
    if finding.kind in ("running_without_run", "lapsed_lease"):
        why = ("running without a live run" if finding.kind == "running_without_run" else
               "its lease lapsed and its dispatcher is gone")
        transitions.hand_back(conn, finding.card_id, f"repaired by kanban check: {why}",
                              now=now, actor=CHECKER)
        return True
    if finding.kind == "ready_with_unfinished_dependency":
        row = conn.one("UPDATE card SET status = 'todo', updated_at = :now WHERE id = :id "
                       "AND status = 'ready' RETURNING board", {"now": now, "id": finding.card_id})
        if row is not None:
            record_event(conn, board=row[0], card_id=finding.card_id, kind="demoted",
                         actor=CHECKER.name, at=now,
                         **status_change(CardStatus.READY, CardStatus.TODO))
        return row is not None
    if finding.kind == "todo_ready":
        return bool(promote_ready(conn, now, candidates=[finding.card_id], actor=CHECKER.name))
    if finding.kind == "open_run":
        return conn.run("UPDATE run SET finished_at = :now, outcome = :outcome, error = :error "
                        "WHERE id = :run AND finished_at IS NULL",
                        {"now": now, "outcome": Outcome.HANDED_BACK, "run": finding.run_id,
                         "error": "closed by kanban check: its card was no longer running"}) > 0
    return False


def check(db: Database, *, fix: bool = False) -> CheckReport:
    """Integrity (SQLite), then the invariants; with `fix`, the safe repairs."""
    report = CheckReport(integrity(db.path) if db.dialect == "sqlite" and db.path else ["ok"])
    if not report.intact:
        return report  # a damaged file: no writes, and its rows cannot be trusted
    with db.read() as conn:
        report.findings = find(conn, db.clock())
    if not fix:
        return report
    for finding in report.findings:
        with db.write() as conn:
            if finding in find(conn, db.clock()) and repair(conn, finding, db.clock()):
                report.repaired.append(finding)
    with db.read() as conn:
        report.findings = find(conn, db.clock())
    return report
