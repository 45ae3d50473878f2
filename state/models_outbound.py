"""The tables of scheduled and outbound work, as SQLModel models: cron jobs, their fires and
deliveries, and notification subscriptions with their outbox (see kanban.state.models,
which re-exports them; the runtime never imports either)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index
from sqlmodel import Field, SQLModel

from kanban.state.model_triggers import partial_where as _where
from kanban.state.timeutil import utcnow
from kanban.state.utc_datetime import UTCDateTime


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
    kind: str = Field(default="agent", max_length=8)  # agent, script or chain
    command: str | None = None  # a script job's shell command
    context_from: str = ""  # comma-separated names of the jobs whose latest results it reads
    model: str | None = None
    toolsets: str | None = None  # comma-separated; None: the profile's
    timeout_s: float | None = None
    max_attempts: int | None = None
    workspace: str | None = None
    priority: int = 0
    deliver: str = "[]"  # a JSON list of delivery targets
    catch_up: str = Field(default="once", max_length=8)
    jitter_s: int = 0
    anchor_at: datetime | None = Field(default=None, sa_type=UTCDateTime)  # interval grid
    skills: str | None = None  # comma-separated skill names for the cards it creates
    review: str | None = None  # the review gate of its cards (migration 10)


class CronFire(SQLModel, table=True):
    """One fire of a cron job (or a skipped or missed slot): the job's history."""

    __tablename__ = "cron_fire"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(index=True)  # no foreign key: history outlives a removed job
    job: str = Field(max_length=64)
    board: str = Field(max_length=64)
    card_id: int | None = Field(default=None, foreign_key="card.id")
    outcome: str = Field(max_length=16)  # fired, skipped, missed, failed
    manual: bool = False
    slots: int = 1
    scheduled_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    fired_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    reason: str | None = None


class CronDelivery(SQLModel, table=True):
    """One delivery of one fire's result to one target, retried until delivered."""

    __tablename__ = "cron_delivery"
    __table_args__ = (
        Index("ix_cron_delivery_due", "next_attempt_at",
              **_where("status IN ('pending', 'sending')")),
    )

    id: int | None = Field(default=None, primary_key=True)
    fire_id: int = Field(foreign_key="cron_fire.id", index=True)
    job: str = Field(max_length=64)
    card_id: int = Field(foreign_key="card.id")
    target: str
    status: str = Field(default="pending", max_length=16)  # pending, sending, delivered, failed
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime,
                                      nullable=False)
    lease_expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class NotifySubscription(SQLModel, table=True):
    """`kanban notify add`: which cards' events go to which target (migration 17)."""

    __tablename__ = "notify_subscription"
    __table_args__ = (Index("ix_notify_subscription_board", "board"),)

    id: int | None = Field(default=None, primary_key=True)
    board: str = Field(max_length=64)
    scope: str = Field(max_length=16)  # card, tree, board, profile
    scope_value: str  # a card id (card, tree), a profile name, or '' (board)
    events: str  # comma-separated: done, failed, blocked, approval, review, cancelled
    target: str
    created_by: str = Field(max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)


class NotifyOutbox(SQLModel, table=True):
    """One event on its way to one subscription's target, written with its transition."""

    __tablename__ = "notify_outbox"
    __table_args__ = (
        Index("ix_notify_outbox_due", "next_attempt_at",
              **_where("status IN ('pending', 'sending')")),
        Index("ix_notify_outbox_board", "board", "status"),  # listings, failing targets
    )

    id: int | None = Field(default=None, primary_key=True)
    subscription_id: int  # kept after the subscription is removed: nothing queued is lost
    board: str = Field(max_length=64)
    card_id: int = Field(foreign_key="card.id", index=True)
    event: str = Field(max_length=16)
    target: str
    payload: str  # JSON, built in the transition's transaction
    status: str = Field(default="pending", max_length=16)  # pending, sending, delivered, failed
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime,
                                      nullable=False)
    lease_expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, nullable=False)
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
