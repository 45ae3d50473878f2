"""The tables, as SQLModel models: the schema's reference, which a test compares with the
migrated database. The runtime never imports this module. Schema changes need a migration."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Index, SmallInteger, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from kanban.state.model_triggers import add_triggers, partial_where
from kanban.state.timeutil import utcnow
from kanban.state.utc_datetime import UTCDateTime

_where = partial_where


# PostgreSQL full-text search: GIN indexes over these expressions (kanban/search.py queries
# the same text); a card's document is a table of its own (card_search, migration 23).
_MESSAGE_TSVECTOR = ("to_tsvector('simple'::regconfig, coalesce(content, '') || ' ' || "
                     "coalesce(tool_calls, ''))")


class Board(SQLModel, table=True):
    name: str = Field(primary_key=True, max_length=64)
    paused: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    # What its cards do when a dependency fails or is cancelled (migration 11): block | cancel
    on_dependency_failure: str = Field(default="block", max_length=8)


class Card(SQLModel, table=True):
    __table_args__ = (
        Index(
            "ix_card_ready_queue",
            text("priority DESC"),
            "id",
            **_where("status = 'ready'"),
        ),
        Index(
            "ix_card_running_lease",
            "lease_expires_at",
            **_where("status = 'running'"),
        ),
        Index("ix_card_board_status", "board", "status"),
        # The cards waiting on dependencies and the running ones, in id order.
        Index("ix_card_todo", "id", **_where("status = 'todo'")),
        Index("ix_card_running", "id", **_where("status = 'running'")),
        # The board view: a column's first cards without sorting the whole column.
        Index("ix_card_board_column", "board", "status", text("priority DESC"), "id",
              **_where("archived_at IS NULL")),
        Index("ix_card_board_finished", "board", "status", text("updated_at DESC"),
              text("id DESC"), **_where("archived_at IS NULL")),
        # Idempotent adds: one unfinished card per key and board.
        Index("ux_card_board_key", "board", "key", unique=True,
              **_where("key IS NOT NULL AND status NOT IN ('done', 'failed', 'cancelled')")),
        # Scheduled cards in the order they fall due.
        Index("ix_card_scheduled", "run_after", **_where("status = 'scheduled'")),
        Index("ix_card_board_live", "board", "id", **_where("archived_at IS NULL")),
        # Ready cards held back by their backoff, in the order they fall due (migration 13).
        Index("ix_card_ready_due", "run_after", **_where("status = 'ready'")),
        Index("ix_card_waiting", "id", **_where("status = 'waiting'")),
        Index("ix_card_finished", "finished_at", **_where("finished_at IS NOT NULL")),
    )

    id: int | None = Field(default=None, primary_key=True)
    board: str = Field(foreign_key="board.name", max_length=64)
    title: str
    goal: str = ""
    context: str = ""
    status: str = Field(default="ready", max_length=16)
    priority: int = 0
    profile: str = Field(default="default", max_length=64)
    model: str | None = None
    toolsets: str | None = None
    parent_id: int | None = Field(default=None, foreign_key="card.id", index=True)
    depth: int = 0
    created_by: str = Field(default="user", max_length=128)
    attempt: int = 0
    max_attempts: int = 3
    retry_base: int = 0  # attempts made before the last manual retry
    timeout_s: float | None = None
    run_after: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    claim_token: str | None = Field(default=None, max_length=64)
    lease_expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    result: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    archived_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    command: str | None = None  # a shell command the worker runs instead of an agent
    cost: float = 0.0  # dollars, all runs (migration 4)
    key: str | None = Field(default=None, max_length=200)  # idempotency key (`add --key`)
    skills: str | None = None  # comma-separated skill names
    workspace: str | None = None  # scratch (NULL), dir:PATH, worktree or parent
    # Durable delegation (migration 8): leaf or orchestrator; the delegation a waiting card
    # waits on (JSON); runs of attempts above resume_base continue one conversation.
    # Review gates and triage (migration 10) add the roles reviewer, decomposer, triaged.
    role: str = Field(default="leaf", max_length=16)
    waiting_on: str | None = None
    resume_base: int = 0
    # Review gates and triage (migration 10)
    review: str | None = None  # the gate: verify:CMD, reviewer:PROFILE or human
    max_reviews: int = 3
    reviews: int = 0  # gate rounds that asked for changes
    feedback: str | None = None  # the last gate's feedback, shown to the next attempt
    subject_id: int | None = Field(default=None, index=True)  # the card it reviews/triages
    # block | cancel when a dependency fails or is cancelled; None: the board's (migration 11)
    on_dependency_failure: str | None = Field(default=None, max_length=8)
    # The trace its runs continue, W3C traceparent (migration 19; set only with telemetry on)
    traceparent: str | None = Field(default=None, max_length=64)


class CardCount(SQLModel, table=True):
    """Unarchived cards per board, profile and status (the board's column counts, stats),
    kept by triggers (migration 14; shards since 20)."""

    __tablename__ = "card_count"

    board: str = Field(primary_key=True, max_length=64)
    profile: str = Field(primary_key=True, max_length=64)
    status: str = Field(primary_key=True, max_length=16)
    n: int
    # PostgreSQL spreads each key over 8 rows (migration 20), so concurrent writers do not
    # queue on one counter row; SQLite keeps shard 0. Readers sum the shards.
    shard: int = Field(default=0, primary_key=True, sa_type=SmallInteger,
                       sa_column_kwargs={"server_default": "0"})


class UsageTotal(SQLModel, table=True):
    """Model calls, tokens and dollars per board, profile and model, kept by a trigger on
    usage (migration 18; shards since 20): what /metrics reads instead of summing every call."""

    __tablename__ = "usage_total"

    board: str = Field(primary_key=True, max_length=64)
    profile: str = Field(primary_key=True, max_length=64)
    model: str = Field(primary_key=True, max_length=128)
    calls: int = Field(sa_type=BigInteger)
    input_tokens: int = Field(sa_type=BigInteger)
    output_tokens: int = Field(sa_type=BigInteger)
    cached_tokens: int = Field(sa_type=BigInteger)
    cost: float  # dollars of the priced calls
    unpriced_calls: int = Field(sa_type=BigInteger)  # calls whose model had no known price
    shard: int = Field(default=0, primary_key=True, sa_type=SmallInteger,  # as card_count's
                       sa_column_kwargs={"server_default": "0"})


class Dependency(SQLModel, table=True):
    card_id: int = Field(foreign_key="card.id", primary_key=True)
    depends_on_id: int = Field(foreign_key="card.id", primary_key=True, index=True)


class Run(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="card.id", index=True)
    attempt: int
    claim_token: str = Field(max_length=64)
    dispatcher_id: int | None = None
    host: str | None = None
    pid: int | None = None
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    heartbeat_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    progress: str | None = None
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    outcome: str | None = Field(default=None, max_length=16)
    exit_code: int | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0  # migration 4
    activity: str | None = None  # JSON: turn, phase, tool, tokens, cost (migration 4)
    activity_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # The worker's start time in clock ticks after boot: (boot, pid, start) names a process.
    proc_start: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class Event(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    board: str = Field(max_length=64)
    card_id: int | None = Field(default=None, index=True)
    run_id: int | None = None
    kind: str = Field(max_length=32)
    actor: str = Field(max_length=128)
    data: str = "{}"
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Comment(SQLModel, table=True):
    __table_args__ = (
        Index("ix_comment_search", text("to_tsvector('simple'::regconfig, body)"),
              postgresql_using="gin").ddl_if(dialect="postgresql"),
    )

    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="card.id", index=True)
    author: str = Field(max_length=128)
    body: str
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Message(SQLModel, table=True):
    __table_args__ = (
        Index("ix_message_search", text(_MESSAGE_TSVECTOR), postgresql_using="gin"
              ).ddl_if(dialect="postgresql"),
    )

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    seq: int
    role: str = Field(max_length=16)
    content: str | None = None
    tool_calls: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    reasoning: str | None = None  # migration 4
    model: str | None = None  # the model that answered (assistant messages)
    data: str | None = None  # JSON: is_error, reasoning_data


class Usage(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    model: str = Field(max_length=128)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    cost: float | None = None  # dollars; None when the model's price is unknown


class Approval(SQLModel, table=True):
    """A dangerous command a worker asked to run, and what a person decided."""

    __table_args__ = (Index("ix_approval_pending", "card_id", **_where("decision = 'pending'")),)

    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="card.id", index=True)
    run_id: int | None = None
    command: str
    pattern: str
    decision: str = Field(default="pending", max_length=16)  # pending | approved | denied
    decided_by: str | None = Field(default=None, max_length=128)
    reason: str | None = None
    requested_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    decided_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class Attachment(SQLModel, table=True):
    """A file stored with a card; its bytes live content-addressed beside the database."""

    __table_args__ = (UniqueConstraint("card_id", "name", name="uq_attachment_card_name"),)

    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="card.id")
    name: str = Field(max_length=255)
    sha256: str = Field(max_length=64, index=True)
    size: int
    media_type: str = Field(max_length=128)
    added_by: str = Field(max_length=128)
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Setting(SQLModel, table=True):
    key: str = Field(primary_key=True, max_length=64)
    value: str


class Wakeup(SQLModel, table=True):
    """One counter, moved by SQLite's triggers when a commit matters to a dispatcher
    (migration 15); PostgreSQL says the same through NOTIFY."""

    id: int = Field(primary_key=True)
    seq: int = Field(sa_type=BigInteger)


class SkillUse(SQLModel, table=True):
    """One use of a skill (migration 16): view, given, write or patch."""

    __tablename__ = "skill_use"
    __table_args__ = (Index("ix_skill_use_skill", "skill", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    skill: str = Field(max_length=64)
    kind: str = Field(max_length=8)
    card_id: int | None = None  # no foreign key: the record outlives a removed card
    profile: str | None = Field(default=None, max_length=64)
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class SkillState(SQLModel, table=True):
    """A skill's pin and curator state (migration 16); no row: active and not pinned."""

    __tablename__ = "skill_state"

    name: str = Field(primary_key=True, max_length=64)
    pinned: bool = False
    state: str = Field(default="active", max_length=8)  # active, stale, archived
    changed_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Dispatcher(SQLModel, table=True):
    __table_args__ = (Index("ix_dispatcher_instance", "instance", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    host: str = Field(max_length=255)
    pid: int
    board: str | None = Field(default=None, max_length=64)  # None: serves every board
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    stopped_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    instance: str | None = Field(default=None, max_length=32)  # random, per run
    boot_id: str | None = Field(default=None, max_length=64)  # the host boot it runs in
    booted_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class SchemaMigration(SQLModel, table=True):
    __tablename__ = "schema_migration"

    id: int = Field(primary_key=True)
    name: str = Field(max_length=128)
    applied_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


# The full-text tables and the triggers, as their migrations (5 and 9) wrote them.
# The tables of scheduled and outbound work (cron, notifications), declared beside these.
from kanban.state.models_outbound import (  # noqa: E402, F401 (re-exported)
    CronDelivery,
    CronFire,
    CronJob,
    NotifyOutbox,
    NotifySubscription,
)

add_triggers(SQLModel.metadata)
