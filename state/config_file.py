"""Reading config.toml into a Config: which file (KANBAN_CONFIG, the board's home, or
none: the defaults), read and parsed (kanban.state.config_parse). Above the Config records
of kanban.state.config, which know nothing of files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kanban.state.config import CONFIG_ENV, Config
from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError


def load_config(path: Path, *, required: bool = False) -> Config:
    """Read config.toml; a missing file gives the defaults, unless `required`."""
    import tomllib  # here: with no config.toml, a command never pays for the parser

    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        if required:
            raise ConfigError(f"{path}: no such config file") from None
        return Config(path=path)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: malformed config: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    return parse_config(raw, path)


def resolve_config(home: Path, env: Mapping[str, str] | None = None) -> Config:
    """$KANBAN_CONFIG if set (it must exist), else config.toml in `home` (or the defaults)."""
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    if explicit:
        return load_config(Path(explicit).expanduser(), required=True)
    return load_config(home / "config.toml")


def worker_config(env: Mapping[str, str]) -> Config:
    """A worker's config: exactly the file its dispatcher used ("" means the dispatcher ran
    on the defaults). Missing or unreadable is an error, never a quiet default."""
    if CONFIG_ENV not in env:
        raise ConfigError(f"worker environment incomplete: {CONFIG_ENV} is not set")
    path = env[CONFIG_ENV]
    return load_config(Path(path), required=True) if path else Config()
