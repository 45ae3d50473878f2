"""A delivery target checked against the machine: a file's folder, a webhook's secret, a
command's program on PATH, a card on the board (for cron jobs and notifications alike)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from kanban.cards import get_card
from kanban.delivery.targets import Target, TargetKind, program_of
from kanban.errors import CardNotFound, ValidationError
from kanban.state.config import Config
from kanban.state.errors import ConfigError
from kanban.state.store import Conn

SECRET_ENV = "KANBAN_WEBHOOK_SECRET"


def webhook_secret(config: Config, env: Mapping[str, str]) -> str | None:
    return env.get(SECRET_ENV) or config.delivery.webhook_secret or None


def check_target(conn: Conn, target: Target, config: Config, env: Mapping[str, str]) -> None:
    if target.kind is TargetKind.FILE:
        path = Path(target.value)
        if path.is_dir():
            raise ValidationError(f"delivery target {target}: is a directory, not a file")
        if not path.parent.is_dir():
            raise ValidationError(f"delivery target {target}: folder {path.parent} "
                                  "does not exist")
    elif target.kind is TargetKind.WEBHOOK:
        if not webhook_secret(config, env):
            raise ConfigError(f"delivery target {target}: webhooks are signed; set "
                              f"[delivery] webhook_secret in config.toml or ${SECRET_ENV}")
    elif target.kind is TargetKind.CMD:
        program = program_of(target)
        if shutil.which(program, path=env.get("PATH")) is None:
            raise ValidationError(f"delivery target {target}: program {program!r} "
                                  "is not on PATH")
    else:
        try:
            get_card(conn, target.card_id)
        except CardNotFound:
            raise ValidationError(f"delivery target {target}: no card "
                                  f"#{target.card_id}") from None
