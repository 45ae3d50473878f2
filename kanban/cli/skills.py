"""`kanban skills`: the skills workers can be given with their use, one skill in full, and
the curator's commands (curate, pin, unpin, restore)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kanban.cli import output
from kanban.cli.base import command, config_of, json_option, location_of, open_kanban
from kanban.errors import ValidationError
from kanban.skill_usage import SkillUsage
from kanban.skills import AGENT

if TYPE_CHECKING:
    from kanban.skills import Skill

ACTIONS = ("curate", "pin", "unpin", "restore")


@command()
@click.argument("words", nargs=-1, metavar="[NAME | curate | pin NAME | unpin NAME | "
                                           "restore NAME]")
@click.option("--dry-run", is_flag=True, help="curate: say what would change, change nothing.")
@json_option
@click.pass_context
def skills(ctx: click.Context, words: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """List the skills workers can be given, or show one (NAME) in full.

    Skills are folders with a SKILL.md in .kanban/skills/, ~/.config/kanban/skills/,
    .kanban/agent-skills/ (written by agents) or installed packages (the kanban.skills entry
    points). The list shows each skill's uses, last use and state (active, stale, archived,
    pinned). `curate` runs the curator now (`--dry-run`: only say what it would do); `pin`
    keeps a skill from the curator and from agents; `restore` brings an archived skill back.
    """
    action = words[0] if words and words[0] in ACTIONS else None
    wanted = 1 if action == "curate" else 2 if action else (0, 1)
    if len(words) not in (wanted if isinstance(wanted, tuple) else (wanted,)):
        raise ValidationError(f"usage: kanban skills [NAME | curate | pin NAME | unpin NAME | "
                              f"restore NAME] (got {' '.join(words)!r})")
    if dry_run and action != "curate":
        raise ValidationError("--dry-run goes with `kanban skills curate`")
    if action == "curate":
        _curate(ctx, dry_run, as_json)
    elif action is not None:
        _decide(ctx, action, words[1])
    elif words:
        _show(ctx, words[0], as_json)
    else:
        _list(ctx, as_json)


def _curate(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    from kanban.skill_curator import curate, named_by_profiles

    kb = open_kanban(ctx)
    config = config_of(ctx)
    done = curate(kb.db, location_of(ctx).home, config.skills, kb.clock(),
                  dry_run=dry_run, named=named_by_profiles(config))
    if as_json:
        output.print_json({"dry_run": dry_run, "moves": [m.to_json() for m in done.moves],
                           "backup": str(done.backup) if done.backup else None})
        return
    if not done.moves:
        output.note("nothing to curate")
    verb = "would mark" if dry_run else "marked"
    for move in done.moves:
        output.out(f"{verb} {move.name} {move.state} (unused for {move.idle_days:.0f} days)")
    if done.backup:
        output.note(f"backup: {done.backup}")


def _decide(ctx: click.Context, action: str, name: str) -> None:
    from kanban import skill_usage
    from kanban.agent_skills import check_name
    from kanban.skill_curator import restore

    check_name(name)
    kb = open_kanban(ctx)
    if action == "restore":
        source = restore(kb.db, location_of(ctx).home, name, kb.clock())
        output.out(f"restored {name} from {source}")
        return
    from kanban.skills import load_catalog

    known = name in load_catalog(location_of(ctx).home).skills
    with kb.db.write() as conn:
        if not known and skill_usage.of(conn, name).state != "archived":
            raise ValidationError(f"no skill named {name!r} (see `kanban skills`)")
        skill_usage.set_state(conn, name, pinned=action == "pin", now=kb.clock())
    output.out(f"{action}ned {name}")


def _show(ctx: click.Context, name: str, as_json: bool) -> None:
    from kanban.skills import load_catalog, shipped_files

    catalog = load_catalog(location_of(ctx).home)
    for problem in catalog.problems:
        output.note(f"kanban: warning: {problem}")
    skill = catalog.get(name)
    files = shipped_files(skill)
    if as_json:
        output.print_json({**skill.to_json(), "body": skill.body, "files": files})
        return
    output.out_lines([f"{skill.name} ({skill.source}, {skill.folder})", skill.description,
                      *([f"written by {skill.written_by}"] if skill.written_by else []),
                      "", *skill.body.splitlines()])
    if files:
        output.out("")
        output.out("other files: " + ", ".join(files))


def _list(ctx: click.Context, as_json: bool) -> None:
    from kanban import skill_usage
    from kanban.skills import load_catalog

    catalog = load_catalog(location_of(ctx).home)
    for problem in catalog.problems:
        output.note(f"kanban: warning: {problem}")
    with open_kanban(ctx).db.read() as conn:
        used = skill_usage.usage(conn)
    listed = list(catalog)
    archived = sorted(n for n, u in used.items() if u.state == "archived"
                      and n not in catalog.skills)
    if as_json:
        output.print_json({"skills": [{**s.to_json(), **_usage(used, s.name).to_json()}
                                      for s in listed],
                           "archived": [{"name": n, **used[n].to_json()} for n in archived],
                           "problems": list(catalog.problems)})
        return
    if not listed and not archived:
        output.note("no skills (add folders with a SKILL.md to .kanban/skills/)")
    for skill in listed:
        output.out(_line(skill, used.get(skill.name)))
    for name in archived:
        output.out(f"{name} (agent): archived; {_uses(used[name])}")


def _usage(used: dict[str, SkillUsage], name: str) -> SkillUsage:
    return used.get(name) or SkillUsage(name)


def _uses(usage: SkillUsage) -> str:
    last = output.when(usage.last_used) if usage.last_used else "never"
    return f"{output.plural(usage.uses, 'use')}, last {last}"


def _line(skill: Skill, usage: SkillUsage | None) -> str:
    """The skill; its use and state once it has any (or an agent wrote it)."""
    tags = f" [{', '.join(skill.tags)}]" if skill.tags else ""
    line = f"{skill.name}{tags} ({skill.source}): {skill.description}"
    if usage is None and skill.source != AGENT:
        return line
    usage = usage or SkillUsage(skill.name)
    return f"{line} — {usage.shown_state()}, {_uses(usage)}"
