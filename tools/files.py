"""The `file` toolset: read, write, edit, list and search files of the card's workspace."""

from __future__ import annotations

import fnmatch
import re
import stat
from typing import Any

from kanban.agent.types import ToolResult
from kanban.state.errors import KanbanError
from kanban.tools import budget
from kanban.tools.confine import Entry, as_text, read_at, read_bytes, write_text
from kanban.tools.confine import entries as walk
from kanban.tools.registry import ToolRegistry
from kanban.tools.workbench import Workbench

TOOLSET = "file"
DEFAULT_LINES = 400
MAX_LINE_CHARS = 2_000
MAX_LISTED = 500
MAX_MATCHES = 200
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv"})


def read_file(args: dict[str, Any], bench: Workbench) -> str:
    name = args["path"]
    with bench.wall().resolve(name) as found:
        text = as_text(read_bytes(found, name, bench.profile.max_file_bytes), name)
    lines = text.splitlines()
    offset = args.get("offset", 1)
    limit = args.get("limit", DEFAULT_LINES)
    if lines and offset > len(lines):
        raise KanbanError(f"{name} has {len(lines)} lines; offset {offset} is past the end")
    chosen = lines[offset - 1: offset - 1 + limit]
    width = len(str(offset + len(chosen)))
    body = [f"{n:>{width}}\t{_clip(line)}" for n, line in enumerate(chosen, start=offset)]
    shown_to = offset + len(chosen) - 1
    head = f"{name}: lines {offset}-{shown_to} of {len(lines)}" if chosen else f"{name}: empty"
    if shown_to < len(lines):
        head += f" (more: read again with offset={shown_to + 1})"
    return bench.bounded("\n".join([head, *body]), "read")


def write_file(args: dict[str, Any], bench: Workbench) -> str | ToolResult:
    name = args["path"]
    content = args["content"]
    with bench.wall().resolve(name, make_folders=True) as found:
        refusal = budget.write_refusal(bench, found.info, len(content.encode("utf-8")))
        if refusal is not None:
            return refusal
        size = write_text(found, name, content, bench.profile.max_file_bytes)
        return f"wrote {size:,} bytes to {found.shown}"


def edit_file(args: dict[str, Any], bench: Workbench) -> str | ToolResult:
    name, old, new = args["path"], args["old"], args["new"]
    with bench.wall().resolve(name) as found:
        text = as_text(read_bytes(found, name, bench.profile.max_file_bytes), name)
        count = text.count(old)
        if count == 0:
            raise KanbanError(f"edit_file: the old text was not found in {name} (0 matches); "
                              "copy it exactly, whitespace included")
        if count > 1:
            raise KanbanError(f"edit_file: the old text matches {count} times in {name}; "
                              "include more surrounding lines so it matches exactly once")
        edited = text.replace(old, new, 1)
        refusal = budget.write_refusal(bench, found.info, len(edited.encode("utf-8")))
        if refusal is not None:
            return refusal
        write_text(found, name, edited, bench.profile.max_file_bytes)
        line = text[: text.index(old)].count("\n") + 1
        return f"edited {found.shown} at line {line}"


def list_files(args: dict[str, Any], bench: Workbench) -> str:
    name = args.get("path", ".")
    wall = bench.wall()
    pattern = args.get("pattern")
    entries: list[str] = []
    with wall.resolve(name) as found:
        if found.info is None or not stat.S_ISDIR(found.info.st_mode):
            raise KanbanError(f"{name} is not a directory")
        for entry in walk(found, wall.hidden_ids(), recursive=pattern is not None,
                          skipped=SKIPPED_DIRS):
            if pattern and not (fnmatch.fnmatch(entry.shown, pattern)
                                or fnmatch.fnmatch(entry.name, pattern)):
                continue
            entries.append(_describe(entry))
            if len(entries) > MAX_LISTED:
                break
    if not entries:
        return f"{name}: nothing" + (f" matches {pattern!r}" if pattern else "")
    more = len(entries) > MAX_LISTED
    listing = "\n".join(entries[:MAX_LISTED])
    return listing + (f"\n... more than {MAX_LISTED} entries; narrow the pattern" if more else "")


def search_files(args: dict[str, Any], bench: Workbench) -> str:
    try:
        regex = re.compile(args["regex"])
    except re.error as exc:
        raise KanbanError(f"search_files: bad regex: {exc}") from None
    name = args.get("path", ".")
    wall = bench.wall()
    glob = args.get("glob")
    cap = bench.profile.max_file_bytes
    matches: list[str] = []
    with wall.resolve(name) as found:
        if found.info is not None and stat.S_ISREG(found.info.st_mode):
            matches = _grep(found.parent, found.name, found.shown, regex, cap)
        for entry in walk(found, wall.hidden_ids(), recursive=True, skipped=SKIPPED_DIRS):
            if not entry.is_file:
                continue
            if glob and not (fnmatch.fnmatch(entry.shown, glob)
                             or fnmatch.fnmatch(entry.name, glob)):
                continue
            matches.extend(_grep(entry.folder, entry.name, entry.shown, regex, cap))
            if len(matches) > MAX_MATCHES:
                break
    if not matches:
        return f"no matches for {args['regex']!r}"
    more = len(matches) > MAX_MATCHES
    text = "\n".join(matches[:MAX_MATCHES])
    return bench.bounded(text + (f"\n... more than {MAX_MATCHES} matches" if more else ""),
                         "search")


def _describe(entry: Entry) -> str:
    if entry.target is not None:
        return f"{entry.shown} -> {entry.target}"
    if entry.is_dir:
        return f"{entry.shown}/"
    return f"{entry.shown}  ({entry.info.st_size:,} bytes)"


def _grep(folder: int, entry: str, relative: str, regex: re.Pattern[str],
          cap: int) -> list[str]:
    try:
        text = as_text(read_at(folder, entry, relative, cap), relative)
    except (KanbanError, OSError):
        return []  # binary, too big, linked or unreadable: searching skips it
    return [f"{relative}:{n}: {_clip(line)}" for n, line in enumerate(text.splitlines(), 1)
            if regex.search(line[:MAX_LINE_CHARS * 5])]


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + " [line cut]"


def register(registry: ToolRegistry) -> None:
    path = {"type": "string", "minLength": 1, "maxLength": 4096,
            "description": "relative to the workspace"}

    def add(name: str, description: str, handler: Any, properties: dict[str, Any],
            required: tuple[str, ...] = ()) -> None:
        schema = {"type": "object", "properties": properties, "required": list(required),
                  "additionalProperties": False}
        writes = name in ("write_file", "edit_file")  # writers one at a time; readers together
        registry.tool(name, description=description, toolset=TOOLSET, parameters=schema,
                      takes_context=True, parallel=not writes)(handler)

    add("read_file", "Read a text file of your workspace as numbered lines (optionally from "
        "line `offset`, at most `limit` lines).", read_file,
        {"path": path, "offset": {"type": "integer", "minimum": 1},
         "limit": {"type": "integer", "minimum": 1, "maximum": 5000}}, ("path",))
    add("write_file", "Create or replace a text file of your workspace with `content` "
        "(folders are created).", write_file,
        {"path": path, "content": {"type": "string"}}, ("path", "content"))
    add("edit_file", "Replace the one exact occurrence of `old` in a file with `new`.",
        edit_file, {"path": path, "old": {"type": "string", "minLength": 1},
                    "new": {"type": "string"}}, ("path", "old", "new"))
    add("list_files", "List a folder of your workspace; with `pattern` (a glob such as "
        "'*.py' or 'src/*.md') list matching files at any depth.", list_files,
        {"path": path, "pattern": {"type": "string", "minLength": 1, "maxLength": 500}})
    add("search_files", "Search text files of your workspace for a regular expression; "
        "`glob` limits which files.", search_files,
        {"regex": {"type": "string", "minLength": 1, "maxLength": 1000}, "path": path,
         "glob": {"type": "string", "minLength": 1, "maxLength": 500}}, ("regex",))
