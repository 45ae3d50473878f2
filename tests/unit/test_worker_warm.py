"""A forkserver's parse of config.toml serves its workers only while the file says the
same: an edit after the parse is read by the next worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kanban.state.errors import ConfigError
from kanban.worker import warm


def test_the_parse_is_used_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[limits]\nlease_s = 7.0\n")
    warm.remember_config(str(path))
    env = {"KANBAN_CONFIG": str(path)}
    first = warm.config(env)
    assert first.limits.lease_s == 7.0
    assert warm.config(env) is first  # not parsed again
    path.write_text("[limits]\nlease_s = 9.0\n")
    assert warm.config(env).limits.lease_s == 9.0
    path.write_text("[limits\n")
    with pytest.raises(ConfigError, match="malformed"):
        warm.config(env)
    path.unlink()
    with pytest.raises(ConfigError, match="no such config file"):
        warm.config(env)


def test_a_bad_file_is_left_to_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[nonsense]\n")
    warm.remember_config(str(path))
    with pytest.raises(ConfigError, match="unknown key"):
        warm.config({"KANBAN_CONFIG": str(path)})
    assert warm.config({"KANBAN_CONFIG": ""}).path is None  # the dispatcher had none
