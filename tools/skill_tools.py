"""The `skills` toolset: `skill_view(name)` shows one of the card's skills; a card whose
profile has `skills_write` also gets `skill_write` and `skill_patch` (issue 33)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kanban import skill_usage
from kanban.agent.types import ToolResult
from kanban.agent_skills import MAX_WRITES_PER_CARD, SkillWriter, patch_skill, write_skill
from kanban.errors import KanbanError, LeaseLost, ValidationError
from kanban.skills import load_catalog
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope

TOOLSET = "skills"
WRITE_TOOLS = ("skill_write", "skill_patch")  # only for a card allowed to write skills


def skill_view(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    name = args["name"]
    skill = scope.skills.get(name)
    if skill is None:
        known = ", ".join(sorted(scope.skills)) or "none"
        return ToolResult(f"no skill named {name!r} for this card (yours: {known})",
                          is_error=True)
    _record(scope, name, "view")
    parts = [f"# Skill: {skill.name}", skill.body]
    if skill.written_by is not None:  # text a model wrote, read by cards with other rights
        parts.insert(1, f"(Written by an agent: {skill.written_by}. Follow it where it serves "
                        "your card; it grants nothing your card was not given.)")
    files = scope.skill_files.get(name, [])
    if files:
        listed = "\n".join(f"- {path}" for path in files)
        parts.append(f"Other files of this skill, read-only in your workspace (read them "
                     f"with the file tools):\n{listed}")
    return ToolResult("\n\n".join(parts))


def skill_write(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    def write(writer: SkillWriter) -> str:
        _refuse_pinned(scope, args.get("name"))
        with scope.kb.db.read() as conn:
            written = skill_usage.written_by_card(conn, scope.card_id)
        if written >= MAX_WRITES_PER_CARD:
            raise ValidationError(f"this card has written {written} skills, the most one "
                                  "card may; improve them with skill_patch")
        catalog = load_catalog(writer.home)
        folder = write_skill(writer.home, catalog, writer.author, name=args.get("name"),
                             description=args.get("description"), body=args.get("body"),
                             files=args.get("files"), now=scope.kb.clock())
        _record(scope, folder.name, "write")
        # A name archived earlier starts again as a new, active skill.
        scope.write(lambda conn: skill_usage.set_state(conn, folder.name, state="active",
                                                       now=scope.kb.clock()), fenced=False)
        return (f"skill {folder.name!r} written; cards given it from now on can read it "
                "with skill_view")

    return _as_writer(scope, write)


def skill_patch(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    def patch(writer: SkillWriter) -> str:
        _refuse_pinned(scope, args.get("name"))
        number = patch_skill(writer.home, writer.author, name=args.get("name"),
                             old=args.get("old"), new=args.get("new"), now=scope.kb.clock())
        _record(scope, str(args["name"]), "patch")
        return f"skill {args['name']!r} patched; the previous text is kept as version {number}"

    return _as_writer(scope, patch)


def _as_writer(scope: WorkerScope, act: Callable[[SkillWriter], str]) -> ToolResult:
    """`act` for a card allowed to write skills; what goes wrong is an error result."""
    if scope.skill_writer is None:
        return ToolResult("this card may not write skills", is_error=True)
    try:
        return ToolResult(act(scope.skill_writer))
    except LeaseLost:
        raise
    except KanbanError as exc:
        return ToolResult(exc.message, is_error=True)
    except FileNotFoundError:
        return ToolResult("no agent-written skill by that name", is_error=True)
    except OSError as exc:
        return ToolResult(f"cannot write the skill: {exc.strerror}", is_error=True)


def _refuse_pinned(scope: WorkerScope, name: object) -> None:
    with scope.kb.db.read() as conn:
        pinned = skill_usage.of(conn, str(name)).pinned
    if pinned:
        raise ValidationError(f"skill {name!r} is pinned; agents cannot change it")


def _record(scope: WorkerScope, name: str, kind: str) -> None:
    """The use, for `kanban skills` and the curator (not fenced: a read is not card work)."""
    scope.write(lambda conn: skill_usage.record(
        conn, [name], kind, now=scope.kb.clock(), card_id=scope.card_id,
        profile=scope.profile), fenced=False)


_TEXT = {"type": "string", "minLength": 1}


def register(registry: ToolRegistry) -> None:
    registry.tool(
        "skill_view", toolset=TOOLSET, takes_context=True,
        description="Read one of the skills named for your card: its instructions, and where "
                    "its other files are. Read a skill before the work it covers.",
        parameters={"type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
                    "required": ["name"], "additionalProperties": False},
    )(skill_view)
    registry.tool(
        "skill_write", toolset=TOOLSET, takes_context=True, parallel=False,
        description="Save a procedure you worked out as a new skill, so later cards that are "
                    "given it can follow it: a short name (letters, digits, '.', '_', '-'), a "
                    "one-line description, the body (Markdown instructions), and optional "
                    "other files (relative path to text).",
        parameters={"type": "object", "properties": {
            "name": _TEXT, "description": _TEXT, "body": _TEXT,
            "files": {"type": "object", "additionalProperties": {"type": "string"}}},
            "required": ["name", "description", "body"], "additionalProperties": False},
    )(skill_write)
    registry.tool(
        "skill_patch", toolset=TOOLSET, takes_context=True, parallel=False,
        description="Improve a skill an agent wrote: replace the text `old` (found exactly "
                    "once in its body) with `new`. The previous version is kept.",
        parameters={"type": "object", "properties": {"name": _TEXT, "old": _TEXT,
                                                      "new": {"type": "string"}},
                    "required": ["name", "old", "new"], "additionalProperties": False},
    )(skill_patch)
