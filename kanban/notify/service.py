"""`Notifications`: subscriptions over one database and board, one transaction per call
(the CLI and the web board use this)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path

from kanban.comments import add_comment
from kanban.delivery.checks import webhook_secret
from kanban.delivery.senders import Context, Message, send
from kanban.delivery.targets import TargetKind, parse_target
from kanban.notify import manage
from kanban.notify.manage import Backlog, SubscriptionSpec
from kanban.notify.outbox import FailingTarget, Subscription, failing_targets
from kanban.state.config import Config
from kanban.state.errors import KanbanError
from kanban.state.store import Database
from kanban.state.timeutil import utcnow


class Notifications:
    """The subscriptions of one board."""

    def __init__(self, db: Database, board: str, *, config: Config, env: Mapping[str, str],
                 home: Path, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.board = board
        self.config = config
        self.env = dict(env)
        self.home = home
        self.clock = clock

    def add(self, spec: SubscriptionSpec, *, actor: str = "user") -> Subscription:
        with self.db.write() as conn:
            return manage.add(conn, self.board, spec, config=self.config, env=self.env,
                              actor=actor, now=self.clock())

    def check_target(self, text: str) -> None:
        """Refuse a target now, before anything it would be added for is stored."""
        from kanban.delivery.checks import check_target

        with self.db.read() as conn:
            check_target(conn, parse_target(text), self.config, self.env)

    def listing(self) -> list[tuple[Subscription, Backlog]]:
        with self.db.read() as conn:
            return manage.listing(conn, self.board)

    def remove(self, sub_id: int) -> Subscription:
        with self.db.write() as conn:
            return manage.remove(conn, self.board, sub_id)

    def redeliver(self) -> int:
        with self.db.write() as conn:
            return manage.redeliver(conn, self.board, now=self.clock())

    def failing(self) -> list[FailingTarget]:
        with self.db.read() as conn:
            return failing_targets(conn, self.board)

    def test(self, sub_id: int) -> str | None:
        """Send a test message to a subscription's target now: None if it took it, else why
        not (nothing is queued: this is for the person setting it up)."""
        with self.db.read() as conn:
            sub = manage.get(conn, self.board, sub_id)
        target, now = parse_target(sub.target), self.clock()
        payload = {"event": "test", "board": self.board, "subscription": sub.id,
                   "at": now.isoformat(), "delivery_id": f"notify-test-{sub.id}"}
        card_id = int(sub.scope_value) if sub.scope in ("card", "tree") else 0
        message = Message(
            delivery_id=str(payload["delivery_id"]), source="notify", author=f"notify:{sub.id}",
            board=self.board, card_id=card_id,
            heading=f"{now:%Y-%m-%d %H:%M:%S} UTC · test of notification {sub.id}",
            text=f"kanban notification {sub.id} ({sub.scope_text}) reaches this target.",
            payload=payload, stdin=json.dumps(payload, sort_keys=True).encode() + b"\n",
            env={"KANBAN_NOTIFY_EVENT": "test"})
        if target.kind is TargetKind.BOARD:
            try:
                with self.db.write() as conn:
                    add_comment(conn, target.card_id, f"{message.heading}\n\n{message.text}",
                                author=message.author, now=now)
            except KanbanError as exc:
                return exc.message
            return None
        ctx = Context(self.config.delivery, webhook_secret(self.config, self.env), self.home,
                      self.env)
        return send(target, message, 1, ctx)
