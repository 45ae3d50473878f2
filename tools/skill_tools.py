"""The `skills` toolset: `skill_view(name)` shows one of the card's skills."""

from __future__ import annotations

from typing import Any

from kanban.agent.types import ToolResult
from kanban.tools.registry import ToolRegistry
from kanban.tools.scope import WorkerScope

TOOLSET = "skills"


def skill_view(args: dict[str, Any], scope: WorkerScope) -> ToolResult:
    name = args["name"]
    skill = scope.skills.get(name)
    if skill is None:
        known = ", ".join(sorted(scope.skills)) or "none"
        return ToolResult(f"no skill named {name!r} for this card (yours: {known})",
                          is_error=True)
    parts = [f"# Skill: {skill.name}", skill.body]
    files = scope.skill_files.get(name, [])
    if files:
        listed = "\n".join(f"- {path}" for path in files)
        parts.append(f"Other files of this skill, read-only in your workspace (read them "
                     f"with the file tools):\n{listed}")
    return ToolResult("\n\n".join(parts))


def register(registry: ToolRegistry) -> None:
    registry.tool(
        "skill_view", toolset=TOOLSET, takes_context=True,
        description="Read one of the skills named for your card: its instructions, and where "
                    "its other files are. Read a skill before the work it covers.",
        parameters={"type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
                    "required": ["name"], "additionalProperties": False},
    )(skill_view)
