"""`kanban skills`: the skills workers can be given, and one skill in full."""

from __future__ import annotations

import click

from kanban.cli import output
from kanban.cli.base import command, json_option, location_of


@command()
@click.argument("name", required=False)
@json_option
@click.pass_context
def skills(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """List the skills workers can be given, or show one (NAME) in full.

    Skills are folders with a SKILL.md in .kanban/skills/, ~/.config/kanban/skills/, or
    installed packages (the kanban.skills entry points).
    """
    from kanban.skills import load_catalog, shipped_files

    catalog = load_catalog(location_of(ctx).home)
    for problem in catalog.problems:
        output.note(f"kanban: warning: {problem}")
    if name is not None:
        skill = catalog.get(name)
        files = shipped_files(skill)
        if as_json:
            output.print_json({**skill.to_json(), "body": skill.body, "files": files})
            return
        output.out_lines([f"{skill.name} ({skill.source}, {skill.folder})", skill.description,
                          "", *skill.body.splitlines()])
        if files:
            output.out("")
            output.out("other files: " + ", ".join(files))
        return
    listed = list(catalog)
    if as_json:
        output.print_json({"skills": [s.to_json() for s in listed],
                           "problems": list(catalog.problems)})
        return
    if not listed:
        output.note("no skills (add folders with a SKILL.md to .kanban/skills/)")
    for skill in listed:
        tags = f" [{', '.join(skill.tags)}]" if skill.tags else ""
        output.out(f"{skill.name}{tags} ({skill.source}): {skill.description}")
