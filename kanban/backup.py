"""`kanban backup PATH`: a consistent copy of a live SQLite database, taken online.

SQLite's backup API copies the database inside one read transaction: in WAL mode that
blocks no writer (a working dispatcher goes on), and the copy is one committed state. It
is written beside PATH, checked, made private and renamed into place, so PATH is either
absent or a whole, verified database. PostgreSQL has its own tool for this: pg_dump.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from kanban.check import integrity
from kanban.errors import KanbanError, ValidationError
from kanban.state.sqlite_errors import translate
from kanban.state.store import Database


@dataclass(frozen=True)
class Backup:
    path: Path
    size: int
    cards: int


def backup(db: Database, dest: Path) -> Backup:
    if db.dialect != "sqlite" or db.path is None:
        raise KanbanError(f"kanban backup copies SQLite databases; back up {db.display} with "
                          "pg_dump (for example `pg_dump -Fc -f kanban.dump URL`)")
    dest = dest.expanduser()
    if dest.exists():
        raise ValidationError(f"{dest} already exists: choose a new file for the backup")
    if not dest.parent.is_dir():
        raise ValidationError(f"{dest.parent} is not a directory")
    if dest.resolve() == db.path.resolve():
        raise ValidationError("the backup cannot be the database itself")
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        _copy(db.path, partial)
        problems = integrity(partial)
        if problems != ["ok"]:
            raise KanbanError(f"the backup does not verify ({problems[0]}): the database may "
                              "be damaged; run `kanban check`")
        with sqlite3.connect(partial) as conn:
            cards = int(conn.execute("SELECT count(*) FROM card").fetchone()[0])
        conn.close()
        os.replace(partial, dest)
    except OSError as exc:
        raise KanbanError(f"cannot write the backup {dest}: {exc.strerror}") from None
    finally:
        partial.unlink(missing_ok=True)
    return Backup(dest, dest.stat().st_size, cards)


def _copy(source: Path, target: Path) -> None:
    fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    src = sqlite3.connect(f"{source.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)  # every page in one step: one read transaction, one consistent state
        dst.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        dst.commit()
    except sqlite3.Error as exc:
        raise translate(target, exc) from None
    finally:
        dst.close()
        src.close()
    with open(target, "rb+") as f:
        os.fsync(f.fileno())
