"""What a forkserver prepares once for the workers it forks, so that no worker does it
after its fork: the config file parsed (checked against the file by each worker)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path

from kanban.state.config import CONFIG_ENV, Config
from kanban.state.config_file import load_config, worker_config
from kanban.state.errors import ConfigError

# config.toml as the forkserver read it: path -> (its text, parsed)
_CONFIGS: dict[str, tuple[str, Config]] = {}


def remember_config(path: str) -> None:
    """In a forkserver: parse `path` once for the workers forked after. Errors are left
    to the workers, which report them on their cards."""
    if not path or path in _CONFIGS:
        return
    with suppress(ConfigError, OSError, UnicodeDecodeError):
        text = Path(path).read_text()
        parsed = load_config(Path(path), required=True)
        if Path(path).read_text() == text:  # not changed while we parsed it
            _CONFIGS[path] = (text, parsed)


def config(env: Mapping[str, str]) -> Config:
    """A worker's config (see `worker_config`): the forkserver's parse while the file
    still says the same, else the file parsed now."""
    path = env.get(CONFIG_ENV) or ""
    known = _CONFIGS.get(path)
    if known is not None:
        with suppress(OSError, UnicodeDecodeError):
            if Path(path).read_text() == known[0]:
                return known[1]
    return worker_config(env)
