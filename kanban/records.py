"""Read-only views of stored rows, with the stable `--json` shape."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from kanban.state.rows import as_time, is_time_column

T = TypeVar("T")


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def row_reader(cls: type[T], columns: Sequence[str]) -> Callable[[Sequence[Any]], T]:
    """A reader of rows of `columns` into `cls` records (every field must be a column):
    which column feeds which field, and which of them hold times, is worked out once here
    rather than for every row (a 10,000-card list spent most of its time on that)."""
    picks = tuple((list(columns).index(name), is_time_column(name)) for name in _field_names(cls))

    def read(row: Sequence[Any]) -> T:
        return cls(*[as_time(value) if timed and (value := row[i]) is not None else row[i]
                     for i, timed in picks])

    return read


class _Record:
    @classmethod
    def from_row(cls: type[T], row: Mapping[str, Any]) -> T:
        return cls(**{name: row[name] for name in _field_names(cls) if name in row})

    def to_json(self) -> dict[str, Any]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}  # type: ignore[call-overload]


@dataclass(frozen=True)
class CardRecord(_Record):
    id: int
    board: str
    title: str
    goal: str
    context: str
    status: str
    priority: int
    profile: str
    model: str | None
    toolsets: str | None
    parent_id: int | None
    depth: int
    created_by: str
    attempt: int
    max_attempts: int
    retry_base: int
    timeout_s: float | None
    run_after: datetime
    lease_expires_at: datetime | None
    result: str | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    archived_at: datetime | None
    command: str | None = None  # set: the worker runs this command instead of an agent
    cost: float = 0.0
    key: str | None = None
    skills: str | None = None
    workspace: str | None = None  # NULL: scratch
    role: str = "leaf"  # leaf, orchestrator (may delegate), reviewer, decomposer or triaged
    waiting_on: str | None = None  # JSON: the delegation a waiting card waits on
    resume_base: int = 0  # runs of later attempts continue one conversation
    review: str | None = None  # the gate (kanban.card_types.Gate): verify:CMD, reviewer:P, human
    max_reviews: int = 3
    reviews: int = 0  # gate rounds that asked for changes so far
    feedback: str | None = None  # the last gate's feedback, for the next attempt
    subject_id: int | None = None  # a reviewer's or decomposer's card
    on_dependency_failure: str | None = None  # block | cancel; None: the board's

    @property
    def skill_names(self) -> tuple[str, ...]:
        return tuple(self.skills.split(",")) if self.skills else ()


@dataclass(frozen=True)
class RunRecord(_Record):
    id: int
    card_id: int
    attempt: int
    host: str | None
    pid: int | None
    started_at: datetime
    heartbeat_at: datetime | None
    progress: str | None
    finished_at: datetime | None
    outcome: str | None
    exit_code: int | None
    error: str | None
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost: float = 0.0
    activity: str | None = None  # JSON, see kanban.activity
    activity_at: datetime | None = None
    # Model calls of the run whose model had no known price: not in `cost` (RUNS_OF_CARD)
    unpriced_calls: int = 0

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["activity"] = json.loads(self.activity) if self.activity else None
        return out


# A card's runs, oldest first, each with its unpriced model calls counted (ix_usage_run_id).
RUNS_OF_CARD = ("SELECT r.*, (SELECT count(*) FROM usage u WHERE u.run_id = r.id AND "
                "u.cost IS NULL) AS unpriced_calls FROM run r WHERE r.card_id = :id "
                "ORDER BY r.id")


@dataclass(frozen=True)
class EventRecord(_Record):
    id: int
    card_id: int | None
    run_id: int | None
    kind: str
    actor: str
    data: str
    at: datetime

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["data"] = json.loads(self.data)
        return out


@dataclass(frozen=True)
class CommentRecord(_Record):
    id: int
    card_id: int
    author: str
    body: str
    at: datetime


@dataclass(frozen=True)
class MessageRecord(_Record):
    run_id: int
    seq: int
    role: str
    content: str | None
    tool_calls: str | None
    tool_call_id: str | None
    name: str | None
    at: datetime
    reasoning: str | None = None
    model: str | None = None
    data: str | None = None  # JSON: is_error, reasoning_data

    @property
    def is_error(self) -> bool:
        return bool(self.data and json.loads(self.data).get("is_error"))

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["tool_calls"] = json.loads(self.tool_calls) if self.tool_calls else []
        extra = json.loads(self.data) if self.data else {}
        out.pop("data", None)
        out["is_error"] = bool(extra.get("is_error"))
        return out


@dataclass(frozen=True)
class AttachmentRecord(_Record):
    """A file stored with a card (its bytes are content-addressed beside the database)."""

    id: int
    card_id: int
    name: str
    sha256: str
    size: int
    media_type: str
    added_by: str
    at: datetime


@dataclass(frozen=True)
class Claim:
    """A card just claimed for a worker."""

    card_id: int
    board: str
    attempt: int
    claim_token: str
    run_id: int
    profile: str
    model: str | None
    timeout_s: float | None
    lease_expires_at: datetime
    retry_base: int = 0  # claims before this budget (hand-backs, retries): see `spent`

    @property
    def spent(self) -> int:
        """Which attempt of the card's budget this claim is (`attempt` counts every claim,
        hand-backs that spent nothing included), as `kanban show` counts it."""
        return self.attempt - self.retry_base


@dataclass(frozen=True)
class CardDetail:
    """Everything `kanban show` and `kanban_show` need about one card."""

    card: CardRecord
    depends_on: tuple[CardRecord, ...]
    dependents: tuple[CardRecord, ...]
    children: tuple[CardRecord, ...]
    comments: tuple[CommentRecord, ...]
    runs: tuple[RunRecord, ...]
    events: tuple[EventRecord, ...]
    attachments: tuple[AttachmentRecord, ...] = ()
    on_dependency_failure: str = "block"  # the policy that applies: the card's, else its board's

    def to_json(self) -> dict[str, Any]:
        def brief(c: CardRecord) -> dict[str, Any]:
            return {"id": c.id, "title": c.title, "status": c.status, "result": c.result}

        return {
            "card": self.card.to_json(),
            "depends_on": [brief(c) for c in self.depends_on],
            "dependents": [brief(c) for c in self.dependents],
            "children": [brief(c) for c in self.children],
            "comments": [c.to_json() for c in self.comments],
            "runs": [r.to_json() for r in self.runs],
            "events": [e.to_json() for e in self.events],
            "attachments": [a.to_json() for a in self.attachments],
            "on_dependency_failure": self.on_dependency_failure,
        }
