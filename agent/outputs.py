"""Oversized tool results: cut to head and tail for the conversation, saved whole on disk,
and paged back on request through the built-in `read_saved_output` tool."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from kanban.agent.types import ToolCall, ToolResult, ToolSpec
from kanban.state.beneath import Found, OutsideWorkspace, Wall
from kanban.state.errors import KanbanError

READ_TOOL = "read_saved_output"
DEFAULT_CAP = 16_000
SAVED_DIR = ".tool-outputs"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")

READ_SPEC = ToolSpec(
    READ_TOOL,
    "Read part of a tool output that was too long to show in full and was saved to a file. "
    "Give the path from the note, the character offset to start at and how many characters "
    "to read.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)


@dataclass
class SavedOutputs:
    """Where cut results are saved: `directory` (in the card's workspace); `cap` is the
    most characters of one result that go into the conversation."""

    directory: Path | None
    cap: int = DEFAULT_CAP

    def __post_init__(self) -> None:
        self._count = 0

    @property
    def spec(self) -> ToolSpec | None:
        """The paging tool, offered only where outputs can be saved."""
        return READ_SPEC if self.directory is not None else None

    def bound(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """The result itself if it is small enough; else its head and tail with a note."""
        content = result.content
        if len(content) <= self.cap:
            return result
        saved = self._save(call, content)
        return ToolResult(cut(content, self.cap, note_for(saved, len(content))),
                          is_error=result.is_error, ends_run=result.ends_run)

    def _save(self, call: ToolCall, content: str) -> str | None:
        if self.directory is None:
            return None
        self._count += 1
        name = f"{self._count:04d}-{_SAFE.sub('_', call.name)[:40]}-{_SAFE.sub('_', call.id)[:40]}"
        try:
            with self._at(f"{name}.txt", make_folders=True) as found:
                if found.info is not None:
                    return None
                fd = os.open(found.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=found.parent)
                with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
                    f.write(content)
        except (KanbanError, OSError):
            return None  # the note then says the text could not be kept
        return f"{SAVED_DIR}/{name}.txt"

    def _at(self, name: str, *, make_folders: bool = False) -> Found:
        """`SAVED_DIR/name` in the workspace, walked without following anything out; a
        symlink anywhere on the way (a planted `SAVED_DIR` folder link) is refused."""
        assert self.directory is not None
        found = Wall(self.directory).resolve(f"{SAVED_DIR}/{name}", make_folders=make_folders)
        if found.parts != (SAVED_DIR, name):
            found.close()
            raise OutsideWorkspace(f"{SAVED_DIR}/{name} is not where it should be")
        return found

    def read(self, call: ToolCall) -> ToolResult:
        """Answer a `read_saved_output` call: a page of a saved file, nothing outside it."""
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict) or not isinstance(args.get("path"), str):
            return ToolResult(f"{READ_TOOL} needs a JSON object with a 'path'", is_error=True)
        offset, limit = args.get("offset", 0), args.get("limit", self.cap // 2)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in (offset, limit)):
            return ToolResult("offset and limit must be non-negative integers", is_error=True)
        text = self._load(args["path"])
        if text is None:
            return ToolResult(f"no saved output {args['path']!r} (use the path from the "
                              "note)", is_error=True)
        limit = max(1, min(limit, self.cap // 2))
        page = text[offset:offset + limit]
        end = offset + len(page)
        more = (f"; {len(text) - end:,} more after this (next offset {end})"
                if end < len(text) else "; this is the end")
        return ToolResult(f"[{args['path']}: characters {offset:,}-{end:,} of {len(text):,}"
                          f"{more}]\n{page}")

    def _load(self, given: str) -> str | None:
        """The text of a saved output named by `given` (its folder is implied), or None."""
        name = os.path.basename(given.strip())
        if self.directory is None or name in ("", ".", ".."):
            return None
        try:
            with self._at(name) as found:
                fd = os.open(found.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                             | os.O_CLOEXEC, dir_fd=found.parent)
                with os.fdopen(fd, "rb") as f:
                    info = os.fstat(f.fileno())
                    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                        return None
                    return f.read().decode("utf-8", "replace")
        except (KanbanError, OSError):
            return None


def note_for(saved: str | None, total: int) -> str:
    if saved is None:
        return (f"[output cut: {total:,} characters, only the start and the end are shown; "
                "the full text could not be saved]")
    return (f"[output cut: {total:,} characters, only the start and the end are shown. The "
            f"whole output is saved as {saved} in your workspace; read it in pieces with "
            f"{READ_TOOL}(path=\"{saved}\", offset=0, limit=8000)]")


def cut(text: str, cap: int, note: str) -> str:
    """Head and tail of `text` around `note`, the whole at most about `cap` characters."""
    room = max(0, cap - len(note) - 2)
    head = room * 2 // 3
    tail = room - head
    return f"{text[:head]}\n{note}\n{text[len(text) - tail:] if tail else ''}"
