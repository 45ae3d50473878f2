"""A job's settings checked against what exists: profiles and webhook secret in config.toml,
the registered toolsets, model specs, programs on PATH, files' folders, cards on the board."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kanban.cards import get_card
from kanban.cron.jobs import JobSpec
from kanban.cron.targets import Target, TargetKind, parse_target, program_of
from kanban.errors import CardNotFound, ValidationError
from kanban.state.config import Config
from kanban.state.errors import ConfigError
from kanban.state.store import Conn

SECRET_ENV = "KANBAN_WEBHOOK_SECRET"


@dataclass(frozen=True)
class Environment:
    """What `cron add` and `cron edit` check a job against."""

    config: Config
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def webhook_secret(self) -> str | None:
        return webhook_secret(self.config, self.env)


def webhook_secret(config: Config, env: Mapping[str, str]) -> str | None:
    return env.get(SECRET_ENV) or config.delivery.webhook_secret or None


def environment(config: Config, env: Mapping[str, str] | None = None) -> Environment:
    """The environment of this process."""
    return Environment(config, dict(os.environ if env is None else env))


def check_job(conn: Conn, spec: JobSpec, env: Environment) -> None:
    """Raise one clear error for the first setting that names something unknown."""
    env.config.profile(spec.profile)
    if spec.model is not None:
        check_model(spec.model)
    if spec.toolsets:
        from kanban.toolsets import check  # built-in, MCP and plug-in toolsets

        check(spec.toolsets, env.config, "--toolsets")
    for text in spec.deliver:
        check_target(conn, parse_target(text), env)


def check_model(spec: str) -> None:
    """The provider must be known and a scripted model's script must exist (other names are
    the provider's to judge: they are not listed offline)."""
    from kanban.agent.model import parse_spec  # here: light, but only adding a job needs it

    provider, name = parse_spec(spec)
    if provider == "scripted":
        from kanban.agent.scripts import load_script

        load_script(name)


def check_target(conn: Conn, target: Target, env: Environment) -> None:
    if target.kind is TargetKind.FILE:
        path = Path(target.value)
        if path.is_dir():
            raise ValidationError(f"delivery target {target}: is a directory, not a file")
        if not path.parent.is_dir():
            raise ValidationError(f"delivery target {target}: folder {path.parent} "
                                  "does not exist")
    elif target.kind is TargetKind.WEBHOOK:
        if not env.webhook_secret:
            raise ConfigError(f"delivery target {target}: webhooks are signed; set "
                              f"[delivery] webhook_secret in config.toml or ${SECRET_ENV}")
    elif target.kind is TargetKind.CMD:
        program = program_of(target)
        if shutil.which(program, path=env.env.get("PATH")) is None:
            raise ValidationError(f"delivery target {target}: program {program!r} "
                                  "is not on PATH")
    else:
        try:
            get_card(conn, target.card_id)
        except CardNotFound:
            raise ValidationError(f"delivery target {target}: no card "
                                  f"#{target.card_id}") from None
