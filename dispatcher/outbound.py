"""Every delivery kanban sends, on one courier: cron's results and the notifications."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from kanban.cron.courier import CronQueue
from kanban.delivery.checks import webhook_secret
from kanban.delivery.courier import Courier
from kanban.delivery.senders import Context
from kanban.dispatcher.logs import event
from kanban.notify.queue import NotifyQueue
from kanban.state.config import Config
from kanban.state.store import Database


def courier_for(db: Database, config: Config, home: Path, env: Mapping[str, str]) -> Courier:
    """A courier for both queues, with the delivery settings and webhook secret of `config`
    and `env`; what stops its rounds goes to the dispatcher's log, a line per change."""
    context = Context(config.delivery, webhook_secret(config, env), home, dict(env))
    return Courier(db, context, [CronQueue(), NotifyQueue()], on_error=_logged)


def _logged(error: str) -> None:
    event(f"deliveries paused: {error}; retrying", logging.WARNING, kind="delivery_failed",
          error=error)
