"""The tables, as SQLModel models. Schema changes also need a migration."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, text
from sqlmodel import Field, SQLModel

from state.timeutil import UTCDateTime, utcnow


class Board(SQLModel, table=True):
    name: str = Field(primary_key=True, max_length=64)
    paused: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Card(SQLModel, table=True):
    __table_args__ = (
        Index(
            "ix_card_ready_queue",
            text("priority DESC"),
            "id",
            sqlite_where=text("status = 'ready'"),  # PostgreSQL gets it in postgres_engine()
        ),
        Index(
            "ix_card_running_lease",
            "lease_expires_at",
            sqlite_where=text("status = 'running'"),
        ),
        Index("ix_card_board_status", "board", "status"),
        # The board view: a column's first cards without sorting the whole column.
        Index("ix_card_board_column", "board", "status", text("priority DESC"), "id",
              sqlite_where=text("archived_at IS NULL")),
        Index("ix_card_board_finished", "board", "status", text("updated_at DESC"),
              text("id DESC"), sqlite_where=text("archived_at IS NULL")),
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
    id: int | None = Field(default=None, primary_key=True)
    card_id: int = Field(foreign_key="card.id", index=True)
    author: str = Field(max_length=128)
    body: str
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Message(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    seq: int
    role: str = Field(max_length=16)
    content: str | None = None
    tool_calls: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Usage(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    model: str = Field(max_length=128)
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class CronJob(SQLModel, table=True):
    __tablename__ = "cron_job"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True, max_length=64)
    board: str = Field(foreign_key="board.name", max_length=64)
    schedule: str
    timezone: str = Field(default="UTC", max_length=64)
    title: str
    goal: str = ""
    profile: str = Field(default="default", max_length=64)
    enabled: bool = True
    overlap: str = Field(default="skip", max_length=8)
    next_fire_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_fire_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    last_card_id: int | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class Setting(SQLModel, table=True):
    key: str = Field(primary_key=True, max_length=64)
    value: str


class Dispatcher(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    host: str = Field(max_length=255)
    pid: int
    board: str | None = Field(default=None, max_length=64)  # None: serves every board
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    stopped_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class SchemaMigration(SQLModel, table=True):
    __tablename__ = "schema_migration"

    id: int = Field(primary_key=True)
    name: str = Field(max_length=128)
    applied_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
