"""Cron job records: kinds, per-job settings, and the checks a job's shape must pass.

A job is enabled exactly when it has a `next_fire_at`. Its kind follows from its settings:
`chain` when it reads other jobs' results (`context_from`; an agent's context, a script's
stdin), else `script` when it has a command, `agent` otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from kanban import validation as v
from kanban.cron.kinds import CatchUp, JobKind, Overlap
from kanban.cron.schedule import Schedule, next_fire_after, parse_schedule
from kanban.delivery.targets import Target, parse_target, parse_targets
from kanban.errors import KanbanError, ValidationError

CREATOR_PREFIX = "cron:"
SCRIPT_TIMEOUT_S = 180.0  # a script job's wall-clock limit unless it sets one
SCRIPT_ATTEMPTS = 1  # a failing script fails its card unless the job allows more attempts
AGENT_ATTEMPTS = 3  # as `kanban add`
MAX_CONTEXT_FROM = 10
MAX_JITTER_S = 3600


class CronJobNotFound(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"no cron job named {name!r} (see `kanban cron list`)")


class CronJobExists(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"a cron job named {name!r} already exists")


class CronJobDisabled(KanbanError):
    def __init__(self, name: str) -> None:
        super().__init__(f"cron job {name!r} is disabled (`kanban cron enable {name}` first)")


class CronJobSpent(KanbanError):
    """A one-shot job whose time has passed: there is nothing left to schedule."""

    def __init__(self, name: str, fire_at: datetime) -> None:
        super().__init__(f"cron job {name!r} was a one-shot for {fire_at:%Y-%m-%d %H:%M:%S} UTC, "
                         "which has passed; add a new job instead")


def creator(name: str) -> str:
    """The `created_by` of a job's cards and the actor of its fires."""
    return f"{CREATOR_PREFIX}{name}"


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


@dataclass(frozen=True)
class JobSpec:
    """Everything a person sets on a job: what `cron add` takes and `cron edit` changes."""

    name: str
    schedule: str
    goal: str = ""
    title: str | None = None  # default: the job's name
    board: str = "default"
    timezone: str = "UTC"
    overlap: str = Overlap.SKIP
    command: str | None = None  # set: a script job
    context_from: tuple[str, ...] = ()
    profile: str = "default"
    model: str | None = None  # None: the profile's
    toolsets: tuple[str, ...] | None = None  # None: the profile's
    timeout_s: float | None = None  # None: 3 minutes for scripts, the profile's for agents
    max_attempts: int | None = None  # None: 1 for scripts, the card default for agents
    workspace: str | None = None  # None: scratch
    priority: int = 0
    deliver: tuple[str, ...] = ()
    catch_up: str = CatchUp.ONCE
    jitter_s: int = 0
    skills: tuple[str, ...] = ()  # skills every card's worker gets
    review: str | None = None  # each card's review gate: verify:CMD, reviewer:PROFILE, human

    @property
    def kind(self) -> JobKind:
        """chain when it reads other jobs' results (a chained script too: on stdin)."""
        if self.context_from:
            return JobKind.CHAIN
        return JobKind.SCRIPT if self.command is not None else JobKind.AGENT

    def validated(self, now: datetime, *, reschedule: bool = True
                  ) -> tuple[JobSpec, Schedule]:
        """The spec with its values normalised, and its schedule; raises one clear error.

        `reschedule=False` re-reads a stored schedule (a one-shot may already be past)."""
        if not v.BOARD_NAME.match(self.name):
            raise ValidationError(f"invalid cron job name {self.name!r}: use 1-64 letters, "
                                  "digits, '.', '_' or '-'")
        title = v.title(self.title if self.title is not None else self.name)
        v.text(self.goal, "goal", v.MAX_GOAL)
        command = self.command
        if command is not None:
            command = v.text(command, "script", v.MAX_GOAL, required=True).strip()
        schedule = parse_schedule(self.schedule, self.timezone, now=now,
                                  allow_past=not reschedule)
        spec = replace(
            self, title=title, command=command, overlap=_choice(Overlap, self.overlap, "overlap"),
            catch_up=_choice(CatchUp, self.catch_up, "catch-up"),
            context_from=self._context_from(), toolsets=self._toolsets(),
            deliver=tuple(str(t) for t in parse_targets(self.deliver)),
            model=(self.model or "").strip() or None,
            workspace=(self.workspace or "").strip() or None,
            skills=v.skill_names(tuple(dict.fromkeys(self.skills))),
            schedule=schedule.resolved_spec if reschedule else self.schedule)
        spec._check_numbers()
        _check_jitter(spec.jitter_s, schedule, now)
        _check_workspace(spec.workspace)
        return replace(spec, review=_check_review(spec.review, spec.command)), schedule

    def _context_from(self) -> tuple[str, ...]:
        names: list[str] = []
        for name in self.context_from:
            if not v.BOARD_NAME.match(name):
                raise ValidationError(f"--context-from: invalid cron job name {name!r}")
            if name == self.name:
                raise ValidationError(f"cron job {name!r} cannot read its own results")
            if name not in names:
                names.append(name)
        if len(names) > MAX_CONTEXT_FROM:
            raise ValidationError(f"a job reads at most {MAX_CONTEXT_FROM} other jobs' results")
        return tuple(names)

    def _toolsets(self) -> tuple[str, ...] | None:
        if self.toolsets is None:
            return None
        names = tuple(dict.fromkeys(t.strip() for t in self.toolsets if t.strip()))
        for name in names:
            if not v.BOARD_NAME.match(name.replace(":", "-")):
                raise ValidationError(f"invalid toolset name {name!r}")
        return names

    def _check_numbers(self) -> None:
        if not v.BOARD_NAME.match(self.profile):
            raise ValidationError(f"invalid profile name {self.profile!r}")
        v.number(self.priority, "priority", v.PRIORITY_RANGE)
        if self.timeout_s is not None:
            v.number(self.timeout_s, "timeout", v.TIMEOUT_RANGE)
        if self.max_attempts is not None:
            v.number(self.max_attempts, "max attempts", v.MAX_ATTEMPTS_RANGE)
        if not 0 <= self.jitter_s <= MAX_JITTER_S:
            raise ValidationError(f"jitter must be between 0 and {MAX_JITTER_S} seconds, "
                                  f"not {self.jitter_s}")


def _choice(enum: type[StrEnum], value: str, what: str) -> Any:
    try:
        return enum(str(value).lower())
    except ValueError:
        allowed = "', '".join(enum)
        raise ValidationError(f"{what} must be '{allowed}', not {value!r}") from None


def _check_jitter(jitter_s: int, schedule: Schedule, now: datetime) -> None:
    """Jitter must stay shorter than the gap between two fires, or it would merge them."""
    if jitter_s <= 0:
        return
    first = next_fire_after(schedule, now, anchor=now)
    second = first and next_fire_after(schedule, first, anchor=now)
    if first is not None and second is not None and timedelta(seconds=jitter_s) >= second - first:
        raise ValidationError(f"jitter of {jitter_s}s is not shorter than the "
                              f"{int((second - first).total_seconds())}s between two fires")


def _check_review(review: str | None, command: str | None) -> str | None:
    """The stored form of a job's review gate (a script's exit code is its own check)."""
    from kanban.review import VERIFY, Gate

    if review is None or not review.strip():
        return None
    gate = Gate.parse(review.strip())
    if gate.kind == VERIFY and command is not None:
        raise ValidationError("a script job's exit code is its own check: give it no verify "
                              "gate (reviewer:PROFILE or human are fine)")
    return gate.spec()


def _check_workspace(workspace: str | None) -> None:
    """The forms a card's workspace takes (a cron card has no parent to share one with)."""
    if workspace is None or workspace in ("scratch", "worktree"):
        return
    if workspace.startswith("dir:") and workspace[4:].startswith("/"):
        return
    raise ValidationError(f"invalid workspace {workspace!r} (use scratch, worktree or "
                          "dir:/ABSOLUTE/PATH)")


@dataclass(frozen=True)
class CronJobRecord:
    """A stored job."""

    id: int
    name: str
    board: str
    schedule: str
    timezone: str
    kind: str
    title: str
    goal: str
    command: str | None
    context_from: tuple[str, ...]
    profile: str
    model: str | None
    toolsets: tuple[str, ...] | None
    timeout_s: float | None
    max_attempts: int | None
    workspace: str | None
    priority: int
    deliver: tuple[str, ...]
    catch_up: str
    jitter_s: int
    enabled: bool
    overlap: str
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_card_id: int | None
    anchor_at: datetime
    created_at: datetime
    skills: tuple[str, ...] = ()
    review: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> CronJobRecord:
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        values["enabled"] = bool(values["enabled"])
        values["context_from"] = tuple(filter(None, (row["context_from"] or "").split(",")))
        values["toolsets"] = (tuple(filter(None, row["toolsets"].split(",")))
                              if row["toolsets"] is not None else None)
        values["deliver"] = tuple(json.loads(row["deliver"] or "[]"))
        values["anchor_at"] = row["anchor_at"] or row["created_at"]
        values["skills"] = tuple(filter(None, (row.get("skills") or "").split(",")))
        return cls(**values)

    @property
    def creator(self) -> str:
        return creator(self.name)

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(parse_target(text) for text in self.deliver)

    def parsed(self, now: datetime) -> Schedule:
        """The stored schedule (a one-shot may already be past)."""
        return parse_schedule(self.schedule, self.timezone, now=now, allow_past=True)

    def spec(self) -> JobSpec:
        """What a person set, to edit and check again."""
        return JobSpec(
            name=self.name, schedule=self.schedule, goal=self.goal, title=self.title,
            board=self.board, timezone=self.timezone, overlap=self.overlap,
            command=self.command, context_from=self.context_from, profile=self.profile,
            model=self.model, toolsets=self.toolsets, timeout_s=self.timeout_s,
            max_attempts=self.max_attempts, workspace=self.workspace, priority=self.priority,
            deliver=self.deliver, catch_up=self.catch_up, jitter_s=self.jitter_s,
            skills=self.skills, review=self.review)

    @property
    def card_timeout_s(self) -> float | None:
        """The wall-clock limit of its cards (None: the profile's)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return SCRIPT_TIMEOUT_S if self.command is not None else None

    @property
    def card_max_attempts(self) -> int:
        if self.max_attempts is not None:
            return self.max_attempts
        return SCRIPT_ATTEMPTS if self.command is not None else AGENT_ATTEMPTS

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "board": self.board, "kind": self.kind,
            "schedule": self.schedule, "timezone": self.timezone, "title": self.title,
            "goal": self.goal, "script": self.command, "context_from": list(self.context_from),
            "profile": self.profile, "model": self.model,
            "toolsets": list(self.toolsets) if self.toolsets is not None else None,
            "timeout_s": self.timeout_s, "max_attempts": self.max_attempts,
            "workspace": self.workspace, "priority": self.priority,
            "deliver": list(self.deliver), "catch_up": self.catch_up, "jitter_s": self.jitter_s,
            "enabled": self.enabled, "overlap": self.overlap,
            "next_fire_at": iso(self.next_fire_at), "last_fire_at": iso(self.last_fire_at),
            "last_card_id": self.last_card_id, "created_at": iso(self.created_at),
            "skills": list(self.skills), "review": self.review,
        }
