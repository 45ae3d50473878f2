"""A job's settings checked against what exists: profiles and webhook secret in config.toml,
the registered toolsets, model specs, programs on PATH, files' folders, cards on the board."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from kanban.cron.jobs import JobSpec
from kanban.delivery.checks import check_target, webhook_secret
from kanban.delivery.targets import parse_target
from kanban.state.config import Config
from kanban.state.store import Conn

__all__ = ["Environment", "check_job", "check_model", "environment", "webhook_secret"]


@dataclass(frozen=True)
class Environment:
    """What `cron add` and `cron edit` check a job against."""

    config: Config
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def webhook_secret(self) -> str | None:
        return webhook_secret(self.config, self.env)


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
        check_target(conn, parse_target(text), env.config, env.env)


def check_model(spec: str) -> None:
    """The provider must be known and a scripted model's script must exist (other names are
    the provider's to judge: they are not listed offline)."""
    from kanban.agent.model import parse_spec  # here: light, but only adding a job needs it

    provider, name = parse_spec(spec)
    if provider == "scripted":
        from kanban.agent.scripts import load_script

        load_script(name)
