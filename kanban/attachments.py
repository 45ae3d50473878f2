"""Files stored with a card: content-addressed beside the database, size-capped, never run.

The bytes live once per content in `<home>/attachments/<sha256[:2]>/<sha256>` (mode 0600,
no execute bit); `attachment` rows name them per card. A file is copied in (hashed while
copied, refused past the cap) before the write transaction, and moved into place inside it,
so a concurrent removal of the same content cannot leave a row without its bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import stat
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from kanban.cards import card_attachments, get_card
from kanban.errors import KanbanError, ValidationError
from kanban.events import record_event
from kanban.records import AttachmentRecord
from kanban.state.rows import with_times
from kanban.state.store import Conn, Database
from kanban.state.timeutil import utcnow

DEFAULT_MAX_BYTES = 25 * 2**20
MAX_NAME = 255
MAX_PER_CARD = 100
_CHUNK = 1 << 16


class AttachmentNotFound(KanbanError):
    def __init__(self, card_id: int, name: str) -> None:
        super().__init__(f"#{card_id} has no attachment named {name!r} "
                         f"(see `kanban attachments list {card_id}`)")


def check_name(name: str) -> str:
    """A file name with no folder in it, printable, at most 255 characters."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise ValidationError(f"invalid attachment name {name!r}: give a plain file name")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ValidationError("attachment name contains control characters")
    if len(name) > MAX_NAME:
        raise ValidationError(f"attachment name is longer than {MAX_NAME} characters")
    return name


class BlobStore:
    """Content-addressed files under one folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256

    def copy_in(self, source: Path, max_bytes: int) -> tuple[Path, str, int]:
        """Copy a regular file to a private temporary file here: (temp, sha256, size)."""
        try:
            fd = os.open(source, os.O_RDONLY | getattr(os, "O_NOCTTY", 0))
        except OSError as exc:
            raise ValidationError(f"cannot read {str(source)!r}: {exc.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValidationError(f"{str(source)!r} is not a regular file")
        with os.fdopen(fd, "rb") as src:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            out_fd, temp = tempfile.mkstemp(dir=self.root, prefix=".incoming-")
            try:
                digest, size = _copy_hashed(src, out_fd, max_bytes, source)
            except BaseException:
                os.unlink(temp)
                raise
        return Path(temp), digest, size

    def settle(self, temp: Path, sha256: str) -> bool:
        """Move `temp` into place unless the content is already there; True if moved."""
        final = self.path(sha256)
        final.parent.mkdir(mode=0o700, exist_ok=True)
        if final.exists():
            temp.unlink()
            return False
        os.replace(temp, final)
        return True

    def discard(self, sha256: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(sha256).unlink()


def _copy_hashed(src: Any, out_fd: int, max_bytes: int, source: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(out_fd, "wb") as out:
        while chunk := src.read(_CHUNK):
            size += len(chunk)
            if size > max_bytes:
                raise ValidationError(f"{source.name} is larger than the attachment limit of "
                                      f"{_human(max_bytes)} ([limits] max_attachment_mb)")
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest(), size


def _human(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB" if size >= 2**20 else f"{size:,} bytes"


# -- rows (in the caller's transaction) ------------------------------------------------------

_COLUMNS = "id, card_id, name, sha256, size, media_type, added_by, at"


def _by_name(conn: Conn, card_id: int, name: str) -> AttachmentRecord | None:
    row = conn.map(f"SELECT {_COLUMNS} FROM attachment WHERE card_id = :id AND name = :name",
                   {"id": card_id, "name": name})
    return AttachmentRecord(**with_times(row)) if row else None


def _lock_content(conn: Conn, sha256: str) -> None:
    """PostgreSQL: serialise adds and removals of one content (SQLite writers take turns)."""
    if conn.dialect == "postgresql":
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(:sha))", {"sha": sha256})


def _referenced(conn: Conn, sha256: str) -> bool:
    return conn.one("SELECT id FROM attachment WHERE sha256 = :sha LIMIT 1",
                    {"sha": sha256}) is not None


# -- the facade ---------------------------------------------------------------------------


class Attachments:
    """Attachments of cards in one database, their bytes beside it in `home`."""

    def __init__(self, db: Database, home: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.blobs = BlobStore(home / "attachments")
        self.max_bytes = max_bytes
        self.clock = clock

    def add(self, card_id: int, source: Path, *, name: str | None = None,
            actor: str = "user") -> tuple[AttachmentRecord, bool]:
        """Store `source` with the card; (record, False) if it was already attached."""
        name = check_name(name if name is not None else source.name)
        with self.db.read() as conn:
            get_card(conn, card_id)  # a missing card fails before any copying
        temp, sha256, size = self.blobs.copy_in(source, self.max_bytes)
        try:
            with self.db.write() as conn:
                return self._insert(conn, card_id, name, temp, sha256, size, actor)
        finally:
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()

    def _insert(self, conn: Conn, card_id: int, name: str, temp: Path, sha256: str,
                size: int, actor: str) -> tuple[AttachmentRecord, bool]:
        card = get_card(conn, card_id)
        existing = _by_name(conn, card_id, name)
        if existing is not None:
            if existing.sha256 == sha256:
                return existing, False
            raise ValidationError(f"#{card_id} already has a different {name!r} (remove it "
                                  f"first: kanban attachments rm {card_id} {name})")
        if conn.scalar("SELECT count(*) FROM attachment WHERE card_id = :id",
                       {"id": card_id}) >= MAX_PER_CARD:
            raise ValidationError(f"#{card_id} already has {MAX_PER_CARD} attachments")
        _lock_content(conn, sha256)
        moved = self.blobs.settle(temp, sha256)
        try:
            now = self.clock()
            media = mimetypes.guess_type(name)[0] or "application/octet-stream"
            conn.execute("INSERT INTO attachment (card_id, name, sha256, size, media_type, "
                         "added_by, at) VALUES (:card, :name, :sha, :size, :media, :by, :at)",
                         {"card": card_id, "name": name, "sha": sha256, "size": size,
                          "media": media, "by": actor, "at": now})
            record_event(conn, board=card.board, card_id=card_id, kind="attached", actor=actor,
                         at=now, name=name, sha256=sha256, size=size)
        except BaseException:
            if moved and not _referenced(conn, sha256):
                self.blobs.discard(sha256)
            raise
        record = _by_name(conn, card_id, name)
        assert record is not None
        return record, True

    def list(self, card_id: int) -> list[AttachmentRecord]:
        with self.db.read() as conn:
            get_card(conn, card_id)
            return card_attachments(conn, card_id)

    def remove(self, card_id: int, name: str, *, actor: str = "user") -> AttachmentRecord:
        """Forget the card's attachment; its bytes go when no card holds them any more."""
        with self.db.write() as conn:
            card = get_card(conn, card_id)
            record = _by_name(conn, card_id, name)
            if record is None:
                raise AttachmentNotFound(card_id, name)
            _lock_content(conn, record.sha256)
            conn.execute("DELETE FROM attachment WHERE id = :id", {"id": record.id})
            record_event(conn, board=card.board, card_id=card_id, kind="detached",
                         actor=actor, at=self.clock(), name=name, sha256=record.sha256)
            if not _referenced(conn, record.sha256):
                self.blobs.discard(record.sha256)
        return record

    def path_of(self, record: AttachmentRecord) -> Path:
        return self.blobs.path(record.sha256)
