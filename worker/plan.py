"""What a worker for a card gets: model, prompt, tools and limits.

One function builds it for the worker process and for `kanban context`, so what the
preview prints is what a worker would be given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kanban.agent.limits import Limits
from kanban.agent.types import Message
from kanban.attachments import Attachments
from kanban.cards import card_attachments
from kanban.comments import unblock_notes
from kanban.endpoints import endpoint_profile, with_endpoint
from kanban.queries import subtree_cost
from kanban.records import CardRecord
from kanban.skills import Skill, SkillCatalog, load_catalog
from kanban.state.config import Config, Profile
from kanban.state.store import Database
from kanban.tools.catalog import REGISTRY
from kanban.tools.registry import Toolbox
from kanban.tools.scope import WorkerScope
from kanban.tools.skill_tools import TOOLSET as SKILLS_TOOLSET
from kanban.tools.skill_tools import WRITE_TOOLS as SKILL_WRITE_TOOLS
from kanban.toolsets import BY_ROLE, for_role
from kanban.worker.materials import Materials, materials_for, place_materials
from kanban.worker.prompts import (
    first_prompt,
    news_since_last_run,
    skills_prompt,
    system_prompt,
)
from kanban.worker.runtime import run_limits
from kanban.worker.toolbox import card_toolsets

if TYPE_CHECKING:
    from kanban.approvals import ApprovalRecord

_PREVIEW = "preview"  # work tools listed for `kanban context`, never called through it


@dataclass(frozen=True)
class WorkerPlan:
    card: CardRecord
    profile: Profile
    model: str  # the model spec the worker resolves
    toolsets: tuple[str, ...]
    skills: tuple[Skill, ...]
    materials: Materials
    system: str
    opening: tuple[Message, ...]  # the user messages after the system prompt
    max_turns: int
    limits: Limits
    timeout_s: float
    # What a resumed conversation is told on top of its stored turns (review feedback, a
    # person's decisions).
    resume_notes: tuple[str, ...] = ()


def skill_names(card: CardRecord, profile: Profile) -> list[str]:
    """The profile's skills, then the card's, each once."""
    return list(dict.fromkeys([*profile.skills, *card.skill_names]))


def plan_run(card: CardRecord, config: Config, env: Mapping[str, str], *,
             catalog: SkillCatalog, materials: Materials, spent_cost: float = 0.0,
             decisions: Sequence[ApprovalRecord] = (),
             endpoint: Profile | None = None, unblocked: Sequence[str] = ()) -> WorkerPlan:
    """The run a worker would make of `card` now; ConfigError/UnknownSkill say why not.
    `spent_cost`: what the card's subtree has cost so far (its max_cost counts it);
    `decisions`: a person's answers to the commands the card asked to run; `endpoint`: the
    profile whose endpoint its model is reached through (kanban.endpoints)."""
    profile = with_endpoint(config.profile(card.profile), endpoint)
    skills = tuple(catalog.require(skill_names(card, profile)))
    toolsets = worker_toolsets(card, profile, config, has_skills=bool(skills))
    max_turns = profile.max_turns
    if card.parent_id is not None:  # a delegated card: the delegation limits apply too
        max_turns = min(max_turns, config.limits.child_max_turns)
    opening = [Message("user", first_prompt(card, materials, decisions, unblocked))]
    if skills:
        opening.insert(0, Message("user", skills_prompt(skills)))
    return WorkerPlan(
        card=card, profile=profile, model=card.model or profile.resolved_model(env),
        toolsets=toolsets, skills=skills, materials=materials, system=system_prompt(toolsets),
        opening=tuple(opening), resume_notes=tuple(news_since_last_run(card, decisions, unblocked)),
        max_turns=max_turns,
        limits=run_limits(profile, max_turns=max_turns, spent_cost=spent_cost),
        timeout_s=card.timeout_s or profile.timeout_s)


def worker_toolsets(card: CardRecord, profile: Profile, config: Config, *, has_skills: bool
                    ) -> tuple[str, ...]:
    """The card's toolsets (see `card_toolsets`; unknown ones raise ConfigError), with the
    skills toolset when the card has skills."""
    chosen = card_toolsets(card, profile, config)
    if has_skills or writes_skills(card, profile):
        chosen.append(SKILLS_TOOLSET)
    chosen += for_role(card.role, profile.role)
    return tuple(dict.fromkeys(chosen))


def writes_skills(card: CardRecord, profile: Profile) -> bool:
    """The profile lets its cards write skills; a delegated card never inherits that."""
    return profile.skills_write and card.parent_id is None


def toolbox_for(plan: WorkerPlan, scope: WorkerScope) -> Toolbox:
    """The registered tools of the plan, as `kanban context` lists them (a worker builds its
    own with `worker.toolbox.toolbox`: bound to its workspace, MCP servers started)."""
    registered = [t for t in plan.toolsets if t in REGISTRY.toolsets()]  # MCP: not started
    exclude = () if writes_skills(plan.card, plan.profile) else SKILL_WRITE_TOOLS
    return REGISTRY.toolbox(registered, scope, exclude=exclude, contexts={
        t: _PREVIEW for t in registered if t not in ("kanban", SKILLS_TOOLSET, *BY_ROLE)})


def prepare_run(attachments: Attachments, card: CardRecord, config: Config,
                env: Mapping[str, str], *, home: Path, workspace: Path) -> WorkerPlan:
    """At worker start: find the skills, copy the materials into the workspace, plan."""
    catalog = _catalog(card, config, env, home)
    skills = catalog.require(skill_names(card, config.profile(card.profile)))
    materials = place_materials(attachments, card.id, skills, workspace)
    return plan_run(card, config, env, catalog=catalog, materials=materials,
                    spent_cost=spent_so_far(attachments.db, card.id),
                    decisions=decisions_of(attachments.db, card.id),
                    endpoint=endpoint_of(attachments.db, config, card.id),
                    unblocked=unblocked_of(attachments.db, card.id))


def preview_run(attachments: Attachments, card: CardRecord, config: Config,
                env: Mapping[str, str], *, home: Path) -> WorkerPlan:
    """The same plan without touching any workspace (for `kanban context`)."""
    catalog = _catalog(card, config, env, home)
    skills = catalog.require(skill_names(card, config.profile(card.profile)))
    with attachments.db.read() as conn:
        records = card_attachments(conn, card.id)
    return plan_run(card, config, env, catalog=catalog,
                    materials=materials_for(records, skills),
                    spent_cost=spent_so_far(attachments.db, card.id),
                    decisions=decisions_of(attachments.db, card.id),
                    endpoint=endpoint_of(attachments.db, config, card.id),
                    unblocked=unblocked_of(attachments.db, card.id))


def decisions_of(db: Database, card_id: int) -> list[ApprovalRecord]:
    """A person's decisions on commands the card asked to run (pending ones are not)."""
    from kanban.approvals import for_card

    with db.read() as conn:
        return [a for a in for_card(conn, card_id) if a.decision != "pending"]


def unblocked_of(db: Database, card_id: int) -> list[str]:
    with db.read() as conn:
        return unblock_notes(conn, card_id)


def endpoint_of(db: Database, config: Config, card_id: int) -> Profile | None:
    with db.read() as conn:
        return endpoint_profile(conn, config, card_id)


def spent_so_far(db: Database, card_id: int) -> float:
    """What the card and the cards it delegated cost so far (max_cost holds for the lot)."""
    with db.read() as conn:
        return subtree_cost(conn, card_id)


def _catalog(card: CardRecord, config: Config, env: Mapping[str, str],
             home: Path) -> SkillCatalog:
    if not skill_names(card, config.profile(card.profile)):
        return SkillCatalog()  # most cards name none: read no folders, load no plugins
    return load_catalog(home, env)
